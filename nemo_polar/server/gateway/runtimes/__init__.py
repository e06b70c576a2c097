"""Where a session's commands run: `local` (bubblewrap or plain processes), `docker`, `apptainer`.

    make_runtime(spec, root, session_id, proxy_url) -> Runtime

Every runtime gives the session a working copy and a HOME at host paths that mean the same inside,
runs each command to completion with a deadline, and leaves nothing behind after `stop()`.
"""

from __future__ import annotations

from pathlib import Path

from ....sandbox import TIMEOUT_RC
from ...contracts import RuntimeSpec
from .base import Runtime
from .local import LocalRuntime

__all__ = ["TIMEOUT_RC", "LocalRuntime", "Runtime", "make_runtime"]


def make_runtime(spec: RuntimeSpec, root: Path, session_id: str, proxy_url: str) -> Runtime:
    if spec.kind == "local":
        return LocalRuntime(
            root,
            repo=spec.repo,
            sandbox=spec.sandbox,
            session_id=session_id,
            proxy_url=proxy_url,
            network=spec.network,
        )
    if spec.kind == "docker":
        from .docker import DockerRuntime  # the SDK is an optional extra

        return DockerRuntime(spec, root, session_id, proxy_url)
    if spec.kind == "apptainer":
        from .apptainer import ApptainerRuntime

        return ApptainerRuntime(spec, root, session_id, proxy_url)
    raise ValueError(f"runtime.kind {spec.kind!r}: choose local, docker or apptainer")
