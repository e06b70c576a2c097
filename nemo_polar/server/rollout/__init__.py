"""The rollout server: tasks become sessions, sessions go to gateway nodes, results come back.

`store` keeps everything in SQLite (a restart loses nothing), `scheduler` picks nodes by load,
`service` is the domain (`RolloutService`), `dispatcher` sends sessions to nodes, `app` is the
HTTP surface over the service (`RolloutServer`, `RolloutThread`, `serve`).
"""

from .app import RolloutServer, RolloutThread, serve
from .dispatcher import Dispatch
from .service import RolloutConfig, RolloutService
from .store import RolloutStore

__all__ = ["Dispatch", "RolloutConfig", "RolloutServer", "RolloutService", "RolloutStore", "RolloutThread", "serve"]
