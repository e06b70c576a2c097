"""A session's runtime the way a node makes one (`RUNTIMES.make`), for the runtime tests."""

from __future__ import annotations

from pathlib import Path

from nemo_polar.runtimes import RUNTIMES, Runtime
from nemo_polar.runtimes.spec import RuntimeSpec


def runtime(spec: RuntimeSpec, root: Path, session_id: str, proxy_url: str) -> Runtime:
    return RUNTIMES.make(spec.kind, spec.options, spec=spec, root=root, session_id=session_id, proxy_url=proxy_url)
