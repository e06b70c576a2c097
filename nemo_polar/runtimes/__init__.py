"""Where a session's commands run: `local` (bubblewrap or plain processes), `docker`, `apptainer`,
or a runtime of your own (`nemo_polar.plugins.RUNTIMES`).

    make_runtime(spec, root, session_id, proxy_url) -> Runtime

Every runtime gives the session a working copy and a HOME at host paths that mean the same inside,
runs each command to completion with a deadline, and leaves nothing behind after `stop()`.
"""

from __future__ import annotations

from pathlib import Path

from ..contracts import RuntimeSpec
from ..plugins import RUNTIMES
from ..sandbox import TIMEOUT_RC
from .base import Runtime
from .local import LocalRuntime

__all__ = ["RUNTIMES", "TIMEOUT_RC", "LocalRuntime", "Runtime", "make_runtime"]


def make_runtime(spec: RuntimeSpec, root: Path, session_id: str, proxy_url: str) -> Runtime:
    return RUNTIMES[spec.kind].from_spec(spec, root, session_id, proxy_url)
