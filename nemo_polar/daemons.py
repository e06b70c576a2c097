"""Daemons this machine runs for us (the test Slurm cluster's, a private Docker engine), known by what /proc says.

A daemon is recorded by its pid, name and start time when it is started, and signalled only while /proc still
names that same process: a pid is never taken from a pid file a daemon wrote, and a pid reused by a later
process is never signalled.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError


def proc_stat(pid: int) -> tuple[str, str, int, str] | None:
    """(name, state, parent pid, start time in clock ticks) of process `pid`, from /proc/<pid>/stat."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return raw[raw.index("(") + 1 : raw.rindex(")")], fields[0], int(fields[1]), fields[19]


def identity(pid: int) -> tuple[str, str] | None:
    """(name, start time) of a live process; None if there is none (or only its zombie, reaped here where it is
    our child)."""
    st = proc_stat(pid)
    if st is None:
        return None
    if st[1] in ("Z", "X"):
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        return None
    return st[0], st[3]


@dataclass
class Daemon:
    name: str
    pid: int
    start: str  # /proc start time: with the name, what tells this process from a later one with its pid
    node: str = ""  # on a several-node cluster, the node this process is (unshare, the node's pid 1) or runs

    def alive(self) -> bool:
        return identity(self.pid) == (self.name[:15], self.start)

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.pid, sig)


def start(argv: list[str], log: Path, node: str = "", env: dict[str, str] | None = None) -> Daemon:
    """`argv` in a session of its own, its output appended to `log`; recorded once /proc knows it."""
    out = open(log, "ab")  # noqa: SIM115 (closed below)
    try:
        p = subprocess.Popen(argv, stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True, env=env)
    finally:
        out.close()
    ident = None
    for _ in range(100):
        ident = identity(p.pid)
        if ident:
            break
        time.sleep(0.01)
    return Daemon(Path(argv[0]).name, p.pid, ident[1] if ident else "", node)


def stop(live: list[Daemon], grace_s: float) -> None:
    """SIGTERM, then SIGKILL after `grace_s`, to processes still named as recorded."""
    live = [d for d in live if d.alive()]
    for d in live:
        d.signal(signal.SIGTERM)
    if not wait(lambda: not any(d.alive() for d in live), grace_s, "", fail=False):
        for d in live:
            d.signal(signal.SIGKILL)  # a node's pid 1 killed ends every process in its pid namespace
        wait(lambda: not any(d.alive() for d in live), 5, "", fail=False)


def wait(ok: Callable[[], object], timeout_s: float, what: str, fail: bool = True) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ok():
            return True
        time.sleep(0.2)
    if fail:
        raise ConfigError(f"timed out after {timeout_s:.0f} s waiting for {what}")
    return False
