"""Where a session's commands run: `local` (bubblewrap or plain processes), `docker`, `apptainer`,
`image` (a root filesystem folder under bubblewrap), one module each (its `Runtime` class with a
`name` is the registration), or a subclass of your own named as `"package.module:Class"`. A node makes one per
session from the task's block: `spec.make(root, session_id, proxy_url)`, which is

    RUNTIMES.make(spec.kind, spec.options, spec=spec, root=root, session_id=session_id, proxy_url=proxy_url)

A task's `runtime` block is `spec.RuntimeSpec`. Every runtime gives the session a working copy and a
HOME at host paths that mean the same inside, runs each command to completion with a deadline, and
leaves nothing behind after `stop()`.
"""

from __future__ import annotations

from ..plugins import Registry
from ..sandbox import TIMEOUT_RC
from .base import Runtime
from .spec import RuntimeSpec

RUNTIMES: Registry[Runtime] = Registry("runtime", Runtime, __name__)
RuntimeSpec.kinds = RUNTIMES  # the spec checks kinds and their settings here without importing the room

__all__ = ["RUNTIMES", "TIMEOUT_RC", "Runtime"]
