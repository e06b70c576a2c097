"""Commands in their own process group, optionally under bubblewrap: the one way the project runs
untrusted work (a harness in a session's runtime, an agent's patched code under its tests).

A command's whole group is killed at its deadline, on cancellation and after it exits, so nothing
it started in the background outlives it. Under bubblewrap a command sees the host's system folders
read-only and none of its data (`host_folders`), /tmp is private, only the named folders are writable, and
the network is loopback only. A process group of ours that serves (vLLM, a launch's processes) is stopped
with a grace (`stop_group`).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from .containment import Containment, Kept, size_bytes

TIMEOUT_RC = 124  # what `timeout(1)` returns: the command was killed at its deadline
READ_GRACE_S = 2.0  # after a kill, how long to wait for output a stray process may still hold open
# The host's top-level folders a sandbox sees: the operating system's programs, libraries and settings. Not
# the rest (home folders, /root, /work, /srv, /mnt, /var, /data...): a node's run folders, datasets, the
# task repositories with their history, the stores; whatever of the host an agent could read, a policy
# learns to read (docs/security.md).
SYSTEM = ("bin", "etc", "lib", "lib32", "lib64", "libx32", "opt", "sbin", "usr")


def bwrap() -> str | None:
    return shutil.which("bwrap")


PACKAGE = Path(__file__).resolve().parent  # this package: the bundled tasks' fixes and tests are in it
# what root may do that a sandboxed command must not: remount the host read-write, make files immutable...
NO_CAPABILITIES = ["--cap-drop", "ALL"] if os.geteuid() == 0 else []


def needed_paths() -> list[str]:
    """What a sandboxed command needs of the host beyond its system folders: this Python's install (the
    forwarder and the tests run with it), outermost folders only."""
    found = sorted({str(p.resolve()) for p in (Path(sys.prefix), Path(sys.base_prefix)) if p.exists()})
    return [p for p in found if not any(p.startswith(q + "/") for q in found)]


def _needed() -> list[str]:
    """bubblewrap's arguments for `needed_paths`, read-only at their own paths, with this package hidden where
    it lies in them (a policy would read the bundled tasks' answers there)."""
    found = needed_paths()
    args = [arg for path in found for arg in ("--ro-bind", path, path)]
    if any(PACKAGE.is_relative_to(p) for p in found):
        args += ["--tmpfs", str(PACKAGE)]
    return args


def bwrap_argv(
    binary: str,
    argv: Sequence[str],
    writable: Sequence[Path | str | tuple[Path | str, Path | str]],
    chdir: Path | str,
    *,
    network: bool,
    extra=(),
    root: Sequence[str] | None = None,
) -> list[str]:
    """`argv` under bubblewrap; `writable` folders are bound at their host path, or (host, inside)
    pairs at a path of their own (under /tmp, the sandbox's tmpfs). No --new-session: the command
    must stay in the process group we kill; it has no controlling terminal anyway
    (start_new_session), so there is no tty to hijack. `root`: `host_folders()` (the default), or the
    same with some top-level folders left out."""
    args = _needed()
    for bind in writable:
        host, inside = bind if isinstance(bind, tuple) else (bind, bind)
        args += ["--bind", str(host), str(inside)]
    args += ["--chdir", str(chdir), "--unshare-pid", "--die-with-parent", *NO_CAPABILITIES]
    if not network:
        args.append("--unshare-net")  # a namespace of its own with only loopback
    return [binary, *(host_folders() if root is None else root), *args, *extra, "--", *argv]


def host_folders(leave_out: Sequence[str] = ()) -> list[str]:
    """The host's system folders (`SYSTEM`) read-only, its symlinks as symlinks, on bubblewrap's own empty
    root, with /dev, /proc and a private /tmp: a command runs the host's programs and sees none of its data,
    and folders can be bound at paths the host does not have (a Harbor task's /tests, /logs/verifier, /app).
    Put before `bwrap_argv`'s own arguments; `leave_out` names top-level entries not to bind."""
    args: list[str] = []
    for entry in sorted(os.listdir("/")):
        path = "/" + entry
        if entry not in SYSTEM or entry in leave_out:
            continue
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return [*args, "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]


async def run_group(
    argv: list[str],
    env: dict[str, str] | None,
    cwd: Path | None,
    timeout: float | None,
    on_start: Callable[[int], None] = lambda pid: None,
    on_end: Callable[[int], None] = lambda pid: None,
    stdin: bytes | None = None,
    max_output: int | None = None,
    on_output_over: Callable[[], None] = lambda: None,
) -> tuple[int, str, str]:
    """Run to completion in a new process group; at `timeout` the whole group is killed and rc is
    TIMEOUT_RC. Past `max_output` bytes of stdout and stderr together the group is killed too (what came
    after is not kept: an endless stream costs the node nothing). Raises OSError when the command cannot
    start."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        env=env,
        cwd=cwd,
        start_new_session=True,
        stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    on_start(proc.pid)
    feeder = None if stdin is None else asyncio.create_task(_feed(proc.stdin, stdin))
    kept = Kept(max_output, lambda: (kill_group(proc.pid), on_output_over()))
    readers = asyncio.gather(_read(proc.stdout, kept), _read(proc.stderr, kept))
    try:
        await asyncio.wait_for(asyncio.shield(proc.wait()), timeout)
        timed_out = False
    except TimeoutError:
        timed_out = True
    except BaseException:
        readers.cancel()
        readers.add_done_callback(lambda f: f.cancelled() or f.exception())  # what the cancelled readers raised
        raise
    finally:  # also on cancellation: never leave the group behind
        kill_group(proc.pid)
        await proc.wait()
        if feeder is not None:
            feeder.cancel()
        on_end(proc.pid)
    out, err = await collect(readers)
    return (TIMEOUT_RC if timed_out else proc.returncode), out, err


async def _feed(pipe: asyncio.StreamWriter, data: bytes) -> None:
    try:
        pipe.write(data)
        await pipe.drain()
        pipe.close()
    except (BrokenPipeError, ConnectionResetError):  # it stopped reading: its business
        pass


async def _read(stream: asyncio.StreamReader, kept: Kept) -> bytes:
    if kept.left is None:
        return await stream.read()
    chunks = []
    while chunk := await stream.read(1 << 16):
        chunks.append(kept.take(chunk))
    return b"".join(chunks)


class ProcessGroups:
    """The process groups one owner (a runtime) runs commands in, so that stopping it kills what still runs; with a
    `Containment`, within the session's limits."""

    def __init__(self, containment: Containment | None = None) -> None:
        self.started: list[int] = []  # every group's leader, in order
        self.live: set[int] = set()
        self.containment = containment

    async def run(
        self, argv: list[str], env: dict[str, str] | None, cwd: Path | None, timeout: float | None
    ) -> tuple[int, str, str]:
        box = self.containment
        if box is None:
            return await run_group(argv, env, cwd, timeout, self._started, self.live.discard)
        async with box.watching(self.kill_all):
            return await run_group(
                box.wrap(argv),
                env,
                cwd,
                timeout,
                self._started,
                self.live.discard,
                max_output=size_bytes(box.limits.output),
                on_output_over=box.output_over,
            )

    def _started(self, pgid: int) -> None:
        self.started.append(pgid)
        self.live.add(pgid)

    def kill_all(self) -> list[int]:
        """Every group still running killed, and with a containment every process of the session; the leaders."""
        live = list(self.live)
        for pgid in live:
            kill_group(pgid)
        if self.containment is not None:
            self.containment.kill_all()
        return live


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def stop_group(target: int | subprocess.Popen, grace_s: float = 15.0) -> None:
    """SIGTERM the process group (a process group id, or our child that leads one), then SIGKILL whatever is left
    after `grace_s`. A child of ours is reaped as it exits: unreaped, its zombie keeps the group alive for
    `killpg` and every stop took the whole grace."""
    child = target if isinstance(target, subprocess.Popen) else None
    pgid = child.pid if child is not None else int(target)
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if child is not None:
            child.poll()
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    kill_group(pgid)


async def collect(readers: asyncio.Future) -> tuple[str, str]:
    """The pipes close once every holder is dead; a process that left the group could keep them."""
    try:
        out, err = await asyncio.wait_for(readers, READ_GRACE_S)
    except TimeoutError:
        return "", "(output lost: a process outside the group kept the pipes open)"
    return out.decode(errors="replace"), err.decode(errors="replace")
