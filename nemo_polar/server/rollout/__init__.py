"""The rollout server: tasks become sessions, sessions go to gateway nodes, results come back.

`store` keeps everything in SQLite (a restart loses nothing), `scheduler` picks nodes by load,
`app` is the HTTP surface (`RolloutServer`, `RolloutThread`, `serve`).
"""

from .app import Dispatch, RolloutConfig, RolloutServer, RolloutThread, serve
from .store import RolloutStore

__all__ = ["Dispatch", "RolloutConfig", "RolloutServer", "RolloutStore", "RolloutThread", "serve"]
