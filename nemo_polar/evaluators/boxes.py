"""Where an evaluator's commands run: a `Sandbox` (base.py), the one thing every evaluation step is given.

A session in an image gives its runtimes: the agent's own (its working copy, where the patch is read or
a Harbor verifier runs) and a fresh one of the same image (where the hidden tests run). On this machine
the same steps take a `HostBox`, a folder here run as a sandbox: commands in it in their own process
group, under bubblewrap when asked (the host read-only, only its folders writable, no network). So an
evaluator has one path; the host and the image differ only in the box it is handed. Files go in
through the box's HOME (`hand_in`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from ..sandbox import TIMEOUT_RC, bwrap, bwrap_argv, run_group
from .base import Completed, Sandbox

FILES = ".polar-eval"  # under a box's HOME: the files we hand it


class HostBox:
    """A folder on this machine as a `Sandbox`. `inside_*` are where its commands see the folders (their
    host paths unless bound elsewhere, which needs bubblewrap); `binds` are more writable (host, inside)
    folders, `readable` host folders seen read-only at their own paths, `root` bubblewrap's view of the host
    (`sandbox.host_folders`, by default all of it)."""

    def __init__(
        self,
        work: Path,
        home: Path,
        *,
        sandbox: bool = False,
        inside_work: str | Path | None = None,
        inside_home: str | Path | None = None,
        binds: Sequence[tuple[Path, str]] = (),
        readable: Sequence[Path] = (),
        root: Sequence[str] | None = None,
    ) -> None:
        self.work, self.home = Path(work), Path(home)
        self.inside_work, self.inside_home = Path(inside_work or work), Path(inside_home or home)
        self.binds, self.readable, self.root = list(binds), list(readable), root
        self.bwrap = bwrap() if sandbox else None
        self.sandboxed = self.bwrap is not None  # asked, and bubblewrap is installed

    async def exec(
        self, argv: list[str], env: dict[str, str] | None = None, timeout: float | None = None
    ) -> tuple[int, str, str]:
        """Like a runtime's: HOME, PATH and LANG under `env`; raises OSError when the command cannot start."""
        full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.inside_home), "LANG": "C.UTF-8"}
        full_env |= env or {}
        self.home.mkdir(parents=True, exist_ok=True)
        if self.bwrap is None:
            return await run_group(argv, full_env, self.work, timeout)
        if shutil.which(argv[0], path=full_env["PATH"]) is None:
            # bubblewrap would start and then fail to exec it: say what a plain start would say
            raise FileNotFoundError(f"{argv[0]} not found")
        writable = [(self.work, self.inside_work), (self.home, self.inside_home), *self.binds]
        extra = [arg for path in self.readable for arg in ("--ro-bind", str(path), str(path))]
        full = bwrap_argv(self.bwrap, argv, writable, self.inside_work, network=False, extra=extra, root=self.root)
        return await run_group(full, full_env, None, timeout)

    async def quiesce(self) -> list[str]:
        """Nothing: under bubblewrap what a command left goes with its pid namespace; without it, the box is
        no sandbox (`sandboxed` says so)."""
        return []


async def run_in(box: Sandbox, argv: list[str], env: dict[str, str] | None, timeout: float | None) -> Completed:
    """`argv` in `box`'s working copy; a command that cannot start is a `Completed` with rc None."""
    try:
        rc, out, err = await box.exec(argv, env, timeout)
    except OSError as exc:
        return Completed(argv, None, error=f"{type(exc).__name__}: {exc}")
    return Completed(argv, rc, out, err, rc == TIMEOUT_RC, extra={"sandboxed": box.sandboxed})


def hand_in(box: Sandbox, name: str, text: str) -> Path:
    """`text` as a file the box's commands can read; its path as they see it."""
    folder = box.home / FILES
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
    return box.inside_home / FILES / name
