"""A session's limits on this machine (`Limits`, a task's `runtime.limits`) and how a runtime that runs its commands
as processes here (`local`, `image`) holds it to them (`Containment`).

A policy under RL is an adversary: one session's fork bomb, memory balloon, disk fill or endless output must not take
the node, and the other sessions on it, down. Where the machine lets us (root and a writable cgroup hierarchy: v2, or
v1's `pids` and `memory` controllers) every command of a session runs in a cgroup of the session's own, made before
anything else runs in it: the kernel refuses a fork past `processes` and kills past `memory` (the pages of the
sandbox's private /tmp count). Elsewhere only rlimits hold (the data segment per process; a process count is per user,
so none): `how` says which. A file past `disk` cannot grow (RLIMIT_FSIZE, both ways), and the session's writable
folders are measured while it runs. A command past `output` bytes of stdout and stderr is ended. Whichever is
passed ends the session with its reason (`exceeded`), and every process of the session goes, those that left their
process group included.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import signal
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Literal

from pydantic import Field

from .config import Strict

log = logging.getLogger("nemo_polar.gateway")
SIZE = r"^[0-9]+[bkmgBKMG]?$"
_UNITS = {"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
CGROUPS = Path("/sys/fs/cgroup")
POLL_S = 0.5  # how often a running session is looked at: its cgroup's counts, its folders' size


class Limits(Strict):
    """What one session may use of the node; `null` lifts a limit."""

    processes: int | None = Field(1024, ge=16, description="processes and threads at once")
    memory: str | None = Field("4g", pattern=SIZE, description="memory, its /tmp included, e.g. 4g or 512m")
    disk: str | None = Field("20g", pattern=SIZE, description="what its working copy and HOME may hold, and any file")
    output: str | None = Field("64m", pattern=SIZE, description="stdout and stderr of one command, kept by the node")
    on_exceeded: Literal["mask", "score"] = Field(
        "mask", description="a session ended by a limit: masked, or graded as the agent left it"
    )


def size_bytes(size: str | None) -> int | None:
    if size is None:
        return None
    unit = size[-1].lower()
    return int(size[:-1]) * _UNITS[unit] if unit in _UNITS else int(size)


class Containment:
    """One session's limits as this machine enforces them. `start` before its first command, `wrap` every command,
    `stop` once it is over (its processes killed, its cgroup removed)."""

    def __init__(
        self, name: str, limits: Limits, folders: Sequence[Path] = (), more_used: Callable[[], int] | None = None
    ):
        self.name, self.limits, self.folders = f"polar-{name}", limits, list(folders)
        self.more_used = more_used  # bytes the session holds beyond its folders (a container's own layer)
        self.cgroups: dict[str, Path] = {}  # controller ("pids", "memory", or "" for v2) -> the session's cgroup
        self.owned = True  # made here, so removed here (not a container's, which its engine removes)
        self.reason: str | None = None  # a limit the watchers saw passed (disk, output)
        self.how = "none"

    def adopt(self, pid: int) -> None:
        """The cgroups `pid` is in (a container's, made and limited by its engine), read for what they counted."""
        self.owned, self.how = False, "the engine's cgroup"
        found = _own_cgroups(pid)
        if (CGROUPS / "cgroup.controllers").exists():
            self.cgroups = {"": CGROUPS / found.get("", "/").lstrip("/")}
        else:
            self.cgroups = {c: CGROUPS / c / found[c].lstrip("/") for c in ("pids", "memory") if c in found}

    # -- set-up and tear-down

    def start(self) -> None:
        """The session's cgroup, with its limits; rlimits alone where none can be made."""
        processes, memory = self.limits.processes, size_bytes(self.limits.memory)
        if processes is None and memory is None:
            self.how = "rlimits"
            return
        try:
            self.cgroups = _make_cgroups(self.name, processes, memory)
            self.how = "cgroup v2" if "" in self.cgroups else "cgroup v1 (pids, memory)"
        except OSError as exc:
            self._remove()
            self.how = "rlimits"
            log.warning("no cgroup for %s (%s): rlimits only, no process limit", self.name, exc)

    def stop(self) -> list[int]:
        """Every process of the session killed, the cgroup removed; the pids killed."""
        killed = self.kill_all()
        self._remove()
        return killed

    # -- commands

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` in the session's cgroup (the shell that enters it execs the rest: nothing runs outside it), under
        the rlimits that hold either way."""
        limits = []
        if (disk := size_bytes(self.limits.disk)) is not None:
            limits.append(f"--fsize={disk}")
        if not self.cgroups and (memory := size_bytes(self.limits.memory)) is not None:
            limits.append(f"--data={memory}")  # not --as: a JavaScript engine reserves far more than it uses
        prlimit = shutil.which("prlimit")
        wrapped = [prlimit, *limits, "--", *argv] if limits and prlimit else list(argv)
        if not self.cgroups:
            return wrapped
        procs = [str(group / "cgroup.procs") for group in self.cgroups.values()]
        enter = 'for p do if [ "$p" = -- ]; then shift; break; fi; echo $$ > "$p" || exit 125; shift; done; exec "$@"'
        return ["/bin/sh", "-c", enter, "polar-enter", *procs, "--", *wrapped]

    def exceeded(self) -> str | None:
        """The limit the session passed, if any: what the watchers saw, else what its cgroup counted."""
        if self.reason is not None:
            return self.reason
        for controller, group in self.cgroups.items():
            events = "memory.events" if not controller else "memory.oom_control"
            if controller in ("", "memory") and _count(group, events, "oom_kill"):
                return f"limit: memory ({self.limits.memory}): the kernel killed a process of the session"
            if controller in ("", "pids") and _count(group, "pids.events", "max"):
                return f"limit: processes ({self.limits.processes}): a fork was refused"
        return None

    def output_over(self) -> None:
        self.over(f"limit: output ({self.limits.output}): a command wrote more to stdout and stderr")

    def over(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
            log.warning("%s: %s", self.name, reason)

    def kill_all(self) -> list[int]:
        """Every process in the session's cgroup killed, those that left their process group included (a fork bomb
        is killed until none is left)."""
        killed: set[int] = set()
        for _ in range(100):
            pids = [pid for group in self.cgroups.values() for pid in _pids(group)]
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            killed.update(pids)
            time.sleep(0.01)  # the killed leave the cgroup as they exit
        return sorted(killed)

    @contextlib.asynccontextmanager
    async def watching(self, on_over: Callable[[], object]) -> AsyncIterator[None]:
        """Around one command: `watch` while it runs, and once it has ended what it wrote in its last moments
        measured."""
        watcher = asyncio.ensure_future(self.watch(on_over))
        try:
            yield
        finally:
            watcher.cancel()
        await self.measure()

    async def watch(self, on_over: Callable[[], object]) -> None:
        """While a command runs: once the session passes a limit (its cgroup's counts, its folders' size), `on_over`
        ends it, at once rather than when the agent ends by itself."""
        while True:
            await asyncio.sleep(POLL_S)
            if self.exceeded() is not None or await self.measure():
                on_over()
                return

    async def measure(self) -> bool:
        """Whether the session's folders hold more than `disk` (the reason kept)."""
        disk = size_bytes(self.limits.disk)
        if disk is None or not self.folders:
            return False
        used = await _used(self.folders)
        if self.more_used is not None:
            used += await asyncio.to_thread(self.more_used)
        if used > disk:
            self.over(f"limit: disk ({self.limits.disk}): the session's folders hold {used} bytes")
        return used > disk

    def _remove(self) -> None:
        """The cgroups removed: a killed process leaves its cgroup once gone, so a few tries, a second at most."""
        if not self.owned:
            self.cgroups = {}
            return
        for _ in range(100):
            for controller, group in list(self.cgroups.items()):
                try:
                    group.rmdir()
                except FileNotFoundError:
                    pass
                except OSError:  # busy: its processes are still going
                    continue
                del self.cgroups[controller]
            if not self.cgroups:
                return
            self.kill_all()
        log.warning("%s: cgroups left behind: %s", self.name, ", ".join(map(str, self.cgroups.values())))
        self.cgroups = {}


class Kept:
    """What one command's stdout and stderr may bring together (`limit` bytes; None: all of it); past it `over` is
    called, once, and the rest dropped: an endless stream costs the node nothing."""

    def __init__(self, limit: int | None, over: Callable[[], object]):
        self.left, self.over = limit, over

    def take(self, chunk: bytes) -> bytes:
        """The part of `chunk` kept."""
        if self.left is None:
            return chunk
        kept = chunk[: self.left]
        self.left -= len(chunk)
        if self.left < 0:
            self.left, over, self.over = 0, self.over, lambda: None
            over()
        return kept


def _make_cgroups(name: str, processes: int | None, memory: int | None) -> dict[str, Path]:
    """The session's cgroup(s) under this process's own, with the limits written; OSError where it cannot."""
    if os.geteuid() != 0:
        raise OSError("not root")
    mine = _own_cgroups()
    if (CGROUPS / "cgroup.controllers").exists():  # v2 alone
        parent = CGROUPS / mine.get("", "/").lstrip("/")
        # the controllers given to our children (EBUSY where this process's own cgroup holds processes)
        (parent / "cgroup.subtree_control").write_text("+pids +memory")
        group = parent / name
        group.mkdir(exist_ok=True)  # a node that died left it: the session's name is its own
        made = {"": group}
        if processes is not None:
            (group / "pids.max").write_text(str(processes))
        if memory is not None:
            (group / "memory.max").write_text(str(memory))
            (group / "memory.swap.max").write_text("0")
        return made
    made = {}
    try:
        for controller, limit, file in (("pids", processes, "pids.max"), ("memory", memory, "memory.limit_in_bytes")):
            if limit is None:
                continue
            root = CGROUPS / controller
            if not (root / "cgroup.procs").exists():
                raise OSError(f"no cgroup v1 {controller} hierarchy at {root}")
            group = root / mine.get(controller, "/").lstrip("/") / name
            group.mkdir(exist_ok=True)  # a node that died left it: the session's name is its own
            made[controller] = group
            (group / file).write_text(str(limit))
            if controller == "memory":
                with contextlib.suppress(OSError):  # no swap accounting on some kernels: memory alone, then
                    (group / "memory.memsw.limit_in_bytes").write_text(str(limit))
    except OSError:
        for group in made.values():
            with contextlib.suppress(OSError):
                group.rmdir()
        raise
    return made


def _own_cgroups(pid: int | str = "self") -> dict[str, str]:
    """A process's cgroup per controller (v1), and "" for the unified one."""
    found = {}
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            found[controller] = path
    return found


def _pids(group: Path) -> list[int]:
    try:
        return [int(pid) for pid in (group / "cgroup.procs").read_text().split()]
    except OSError:
        return []


def _count(group: Path, file: str, key: str) -> int:
    try:
        found = re.search(rf"^{key} (\d+)$", (group / file).read_text(), re.MULTILINE)
    except OSError:
        return 0
    return int(found.group(1)) if found else 0


async def _used(folders: Sequence[Path]) -> int:
    """Bytes on disk under `folders` (du: blocks, hard links once)."""
    proc = await asyncio.create_subprocess_exec(
        "du", "-s", "-B1", "-c", *map(str, folders), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
    )
    out, _ = await proc.communicate()
    last = out.decode().strip().splitlines()[-1:] or ["0"]
    return int(last[0].split()[0])
