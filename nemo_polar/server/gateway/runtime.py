"""Where a session's commands run. `LocalRuntime`: a session folder on this machine (a working copy
and a HOME), each command in its own process group, under bubblewrap when it is installed."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import uuid
from pathlib import Path
from typing import Protocol

TIMEOUT_RC = 124  # what `timeout(1)` returns: the command was killed at its deadline
READ_GRACE_S = 2.0  # after a kill, how long to wait for output a stray process may still hold open
# the read-only host; the session's writable binds come after the tmpfs, or /tmp would hide them
BWRAP_HOST = "--ro-bind / / --dev /dev --proc /proc --tmpfs /tmp".split()


class Runtime(Protocol):
    async def start(self) -> None: ...
    async def exec(
        self, argv: list[str], env: dict[str, str] | None = None, timeout: float | None = None
    ) -> tuple[int, str, str]: ...
    async def stop(self) -> None: ...


class LocalRuntime:
    def __init__(
        self, root: str | Path, repo: str | Path | None = None, sandbox: bool = True, session_id: str | None = None
    ) -> None:
        self.folder = Path(root).resolve() / (session_id or uuid.uuid4().hex)
        self.work, self.home = self.folder / "work", self.folder / "home"
        self.repo = Path(repo) if repo else None
        self.bwrap = shutil.which("bwrap") if sandbox else None
        self.pids: list[int] = []  # every process group this runtime started (its leaders' pids)
        self._live: set[int] = set()

    @property
    def sandboxed(self) -> bool:
        return self.bwrap is not None

    async def start(self) -> None:
        await asyncio.to_thread(self._make_folders)

    def _make_folders(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=False)  # a reused id would mix two sessions' files
        if self.repo is not None:
            shutil.copytree(self.repo, self.work, symlinks=True)
        else:
            self.work.mkdir()
        self.home.mkdir()

    def base_env(self) -> dict[str, str]:
        return {"HOME": str(self.home), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}

    def wrap(self, argv: list[str]) -> list[str]:
        if self.bwrap is None:
            return list(argv)
        # Read-only host, private /tmp, the session's two folders writable at their host paths (so
        # paths in configs mean the same inside and out). The network namespace is shared: the
        # proxy listens on loopback and must stay reachable. Isolating the harness down to the
        # proxy alone needs --unshare-net plus a forwarder into the namespace: left for later.
        # No --new-session: the command must stay in the process group we kill; it has no
        # controlling terminal anyway (start_new_session), so there is no tty to hijack.
        work, home = str(self.work), str(self.home)
        rw = ["--bind", work, work, "--bind", home, home, "--chdir", work]
        return [self.bwrap, *BWRAP_HOST, *rw, "--unshare-pid", "--die-with-parent", "--", *argv]

    async def exec(
        self, argv: list[str], env: dict[str, str] | None = None, timeout: float | None = None
    ) -> tuple[int, str, str]:
        """Run to completion; at `timeout` the whole process group is killed and rc is TIMEOUT_RC.
        Nothing the command started in the background outlives it: the group is killed either way."""
        proc = await asyncio.create_subprocess_exec(
            *self.wrap(argv),
            env=self.base_env() | (env or {}),
            cwd=self.work,
            start_new_session=True,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        self.pids.append(proc.pid)
        self._live.add(proc.pid)
        readers = asyncio.gather(proc.stdout.read(), proc.stderr.read())
        try:
            await asyncio.wait_for(asyncio.shield(proc.wait()), timeout)
            timed_out = False
        except TimeoutError:
            timed_out = True
        except BaseException:
            readers.cancel()
            raise
        finally:  # also on cancellation: never leave the group behind
            _kill_group(proc.pid)
            await proc.wait()
            self._live.discard(proc.pid)
        out, err = await _collect(readers)
        return (TIMEOUT_RC if timed_out else proc.returncode), out, err

    async def stop(self) -> None:
        for pid in list(self._live):
            _kill_group(pid)
        await asyncio.to_thread(shutil.rmtree, self.folder, True)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


async def _collect(readers: asyncio.Future) -> tuple[str, str]:
    """The pipes close once every holder is dead; a process that left the group could keep them."""
    try:
        out, err = await asyncio.wait_for(readers, READ_GRACE_S)
    except TimeoutError:
        return "", "(output lost: a process outside the group kept the pipes open)"
    return out.decode(errors="replace"), err.decode(errors="replace")
