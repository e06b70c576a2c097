"""`LocalRuntime`: a session folder on this machine (a working copy and a HOME), each command in its
own process group, under bubblewrap when it is installed.

With bubblewrap: the host's system folders read-only and none of its data (`sandbox.host_folders`: not the
node's folders, the datasets, the task repositories, the stores), a private /tmp, the two folders writable
at fixed paths on it (/tmp/polar/work and /tmp/polar/home, the same in every session), the harness toolchain
and our scripts read-only beside them (/tmp/polar/tools, /tmp/polar/scripts), the task's `volumes` (e.g. the
folder of an agent script of your own), and by default (network "proxy") a network namespace of its own
with only loopback, in which forward.py listens at the proxy's host:port and pipes to the gateway through a
Unix socket. Without bubblewrap: plain processes, no isolation.

`workdir` puts the working copy where a task expects it (a Harbor task's /app: its solutions and tests write
there by absolute path): bubblewrap binds it there, over the host's folders on an empty root
(`sandbox.host_folders`). Without bubblewrap nothing can put it there, so such a session does not start (an
agent that could not reach the task's files must never be scored as a wrong answer).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shlex
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Self

from pydantic import Field

from ..containment import Containment, Limits
from ..sandbox import SYSTEM, ProcessGroups, bwrap_argv, host_folders, needed_paths
from . import toolchain
from .base import (
    FORWARD_SCRIPT,
    HOST_PYTHON,
    Placed,
    ProxyTunnel,
    Runtime,
    forward_argv,
    inside_url,
    make_folders,
    parse_volume,
    remove_tree,
)

if TYPE_CHECKING:
    from .spec import RuntimeSpec

log = logging.getLogger("nemo_polar.gateway")
IN_WORK, IN_HOME = Path("/tmp/polar/work"), Path("/tmp/polar/home")
IN_TOOLS, IN_SCRIPTS = Path("/tmp/polar/tools"), Path("/tmp/polar/scripts")


class LocalSettings(Placed):
    sandbox: bool = Field(True, description="bubblewrap where present (read-only host, private /tmp)")
    workdir: str | None = Field(
        None, description="where commands see the working copy, e.g. a Harbor task's /app (needs bubblewrap)"
    )

    volumes: list[str] = Field(
        default_factory=list,
        description="host folders the sandbox sees, HOST:INSIDE[:ro|rw] (read-only by default), e.g. your agent "
        "script's: nothing of the host but its system folders is there otherwise (needs bubblewrap)",
    )


class LocalRuntime(Runtime):
    """This machine: a copy of `repo` (its history cut at `commit`) in the session's folder, under bubblewrap
    where present."""

    name = "local"

    Settings = LocalSettings

    @classmethod
    def sandboxes(cls, settings: LocalSettings) -> bool:
        return settings.sandbox

    @classmethod
    def make(cls, settings: LocalSettings, *, spec: RuntimeSpec, root: Path, session_id: str, proxy_url: str) -> Self:
        return cls(
            root,
            repo=spec.repo,
            commit=spec.commit,
            sandbox=settings.sandbox,
            session_id=session_id,
            proxy_url=proxy_url,
            network=spec.network,
            env=spec.env,
            workdir=settings.workdir,
            volumes=settings.volumes,
            limits=settings.limits,
        )

    def __init__(
        self,
        root: str | Path,
        repo: str | Path | None = None,
        commit: str | None = None,
        sandbox: bool = True,
        session_id: str | None = None,
        proxy_url: str | None = None,
        network: str = "proxy",
        env: dict[str, str] | None = None,
        workdir: str | None = None,
        volumes: list[str] = (),
        limits: Limits | None = None,
    ) -> None:
        self.folder = Path(root).resolve() / (session_id or uuid.uuid4().hex)
        self.work, self.home = self.folder / "work", self.folder / "home"
        self.repo, self.commit = (Path(repo) if repo else None), commit
        self.bwrap = shutil.which("bwrap") if sandbox else None
        if sandbox and self.bwrap is None:
            log.warning("bubblewrap is not installed: sessions run as plain processes, with no isolation")
        self.network = network
        self.env = dict(env or {})
        self.path = self.env.get("PATH") or os.environ.get("PATH", "/usr/bin:/bin")
        self.tunnel: ProxyTunnel | None = None
        self.proxy_url, self.listen = proxy_url, []
        if self.bwrap and network == "proxy" and proxy_url:
            self.proxy_url, self.listen = inside_url(proxy_url)
            self.tunnel = ProxyTunnel(proxy_url, self.folder)
        elif self.bwrap and network == "none":
            self.proxy_url = None
        # under bubblewrap the session's folders sit at fixed paths on the sandbox's private /tmp, or the working
        # copy where the task wants it (its top folder the task's, not the host's)
        self.inside_work, self.inside_home = (IN_WORK, IN_HOME) if self.bwrap else (self.work, self.home)
        self.workdir, self.root_args = workdir, host_folders()
        if self.bwrap and workdir:
            self.inside_work = Path(workdir)
            self.root_args = host_folders(leave_out=[Path(workdir).parts[1]])
        if self.bwrap:
            self.inside_tools, self.inside_scripts = IN_TOOLS, IN_SCRIPTS
        self.volumes = [parse_volume(v) for v in volumes]
        # the limits hold for every command, sandboxed or not
        self.containment = Containment(self.folder.name, limits or Limits(), [self.folder])
        self.groups = ProcessGroups(self.containment)

    @property
    def sandboxed(self) -> bool:
        return self.bwrap is not None

    @property
    def isolated_network(self) -> bool:
        return self.bwrap is not None and self.network != "host"

    async def start(self) -> None:
        if self.workdir and not self.bwrap:
            raise RuntimeError(
                f"runtime.workdir {self.workdir}: only bubblewrap can put the working copy there, and this machine "
                "runs sessions without it (install bubblewrap, or run the task in an image)"
            )
        await asyncio.to_thread(make_folders, self.folder, self.work, self.home, self.repo, self.commit)
        self.containment.start()
        if self.tunnel is not None:
            try:
                await self.tunnel.start()
            except BaseException:
                await self.stop()
                raise

    def base_env(self) -> dict[str, str]:
        return {"HOME": str(self.inside_home), "PATH": self.path, "LANG": "C.UTF-8"} | self.env

    def wrap(self, argv: list[str]) -> list[str]:
        if self.bwrap is None:
            return list(argv)
        extra: list[str] = []
        if toolchain.TOOLS.is_dir():
            extra += ["--ro-bind", str(toolchain.TOOLS.resolve()), str(IN_TOOLS)]
        extra += ["--ro-bind", str(toolchain.SCRIPTS), str(IN_SCRIPTS)]
        for host, inside, writable in self.volumes:
            extra += ["--bind" if writable else "--ro-bind", host, inside]
        if self.tunnel is not None:
            sock_dir = str(self.tunnel.folder)
            extra += ["--ro-bind", sock_dir, sock_dir]  # connect() needs no write access to the mount
            forwarder = str(IN_SCRIPTS / FORWARD_SCRIPT.name)  # the package itself is not in the sandbox
            argv = forward_argv(HOST_PYTHON, forwarder, self.listen, str(self.tunnel.socket_path), argv)
        writable = [(self.work, self.inside_work), (self.home, self.inside_home)]
        return bwrap_argv(
            self.bwrap,
            argv,
            writable,
            self.inside_work,
            network=not self.isolated_network,
            extra=extra,
            root=self.root_args,
        )

    async def exec(
        self, argv: list[str], env: dict[str, str] | None = None, timeout: float | None = None
    ) -> tuple[int, str, str]:
        """Run to completion; at `timeout` the whole process group is killed and rc is TIMEOUT_RC."""

        return await self.groups.run(self.wrap(argv), self.base_env() | (env or {}), self.work, timeout)

    def unseen(self, argv: list[str]) -> list[str]:
        if self.bwrap is None:
            return []
        words = [w for arg in argv for w in (_words(arg) if " " in arg else [arg])]
        shown = [f"/{entry}" for entry in SYSTEM] + [inside for _, inside, _ in self.volumes]
        shown += [str(self.inside_work), str(self.inside_home), str(IN_TOOLS), str(IN_SCRIPTS), *needed_paths()]
        return sorted(
            {w for w in words if w.startswith("/") and Path(w).exists() and not any(_under(w, s) for s in shown)}
        )

    async def quiesce(self) -> list[str]:
        """The session's process groups killed. Under bubblewrap each command has a pid namespace of its own
        that goes with it (--unshare-pid, --die-with-parent): what left its group (setsid, a daemon) goes
        too. Without bubblewrap such a process cannot be found: that session is not sandboxed."""
        return [f"process group {pgid}" for pgid in self.groups.kill_all()]

    async def changed_outside(self) -> list[str] | None:
        """Nothing: the host is read-only and /tmp is each command's own (None without bubblewrap)."""
        return [] if self.bwrap else None

    async def stop(self) -> None:
        self.groups.kill_all()
        self.containment.stop()
        if self.tunnel is not None:
            await self.tunnel.stop()
        await asyncio.to_thread(remove_tree, self.folder)


def _words(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")
