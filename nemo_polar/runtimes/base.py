"""What every runtime shares: the base class, the session folder, the mounts every container-like
runtime makes (`ContainerRuntime`: docker, apptainer, image), and the proxy tunnel (the host end of the
in-sandbox forwarder, see inside/forward.py)."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import shutil
import sys
import tempfile
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, field_validator

from ..config import Strict
from ..containment import Containment, Limits
from ..errors import SandboxError
from ..plugins import Plugin
from . import history, toolchain
from .inside import forward

if TYPE_CHECKING:
    from .spec import RuntimeSpec

FORWARD_SCRIPT = Path(forward.__file__)
# where docker, apptainer and image mount the session's folders (the local runtime: see local.py), the
# harness toolchain, our in-sandbox scripts and the tunnel's socket folder
CONTAINER_WORK, CONTAINER_HOME = Path("/polar/work"), Path("/polar/home")
CONTAINER_TOOLS, CONTAINER_SCRIPTS = Path("/polar/tools"), Path("/polar/scripts")
IN_SOCKET_DIR, IN_FORWARD = "/polar/proxy", f"/polar/scripts/{FORWARD_SCRIPT.name}"
HOST_PYTHON = sys.executable
RESERVED = "/polar"  # where the runtimes mount the session's folders, the toolchain and our scripts
# the PATH of an image that names none (a root filesystem folder), as Debian's login shells set it
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class Inside:
    """Where a session's things are as its commands see them (the runtime's fixed paths)."""

    home: Path
    work: Path
    tools: Path = toolchain.TOOLS  # the harness toolchain (toolchain.py)
    scripts: Path = toolchain.SCRIPTS  # our in-sandbox scripts (inside/)
    path: str = field(default_factory=lambda: os.environ.get("PATH", "/usr/bin:/bin"))  # the sandbox's own PATH

    def node(self, cli: str) -> list[str]:
        """A Node.js CLI of the toolchain, started by the toolchain's own node (not the image's)."""
        return [str(self.tools / toolchain.NODE), str(self.tools / "node" / "bin" / cli)]

    def python(self, folder: str) -> list[str]:
        """The Python of the toolchain's `folder` (a harness's own), isolated: the image's PYTHONPATH, the user
        site and the working folder stay off its path."""
        return [str(self.tools / folder / "bin" / "python3"), "-I"]


@dataclass(frozen=True)
class Bind:
    host: Path
    inside: Path
    writable: bool = False


class Runtime(Plugin, ABC):
    """A session's sandbox. `work` and `home` are host folders; `inside_*` are where its commands see them.

    A task names its runtime by `runtime.kind` (`runtimes.RUNTIMES`, or a subclass of yours
    as 'package.module:Class'); the node builds it with `RUNTIMES.make`, the same call as every kind of plug-in."""

    kind = "runtime"
    work: Path | None  # host paths; work is None when the working copy is the image's own folder
    home: Path
    # The same folders as the commands see them: a fixed path per runtime kind, so that nothing
    # before a session's first model call differs between the samples of a task (harnesses put
    # their working directory in the system prompt, and GRPO groups samples by the first prompt).
    inside_work: Path
    inside_home: Path
    inside_tools: Path = toolchain.TOOLS  # the harness toolchain
    inside_scripts: Path = toolchain.SCRIPTS  # our in-sandbox scripts (forward.py, openhands_runner.py)
    path: str = DEFAULT_PATH  # PATH inside, before a harness adds the toolchain's node
    in_image: ClassVar[bool] = False  # the kind runs an image: commands see its root filesystem, grading too
    pulls: ClassVar[bool] = False  # it takes an image by its registry name (e.g. a row's SWE-bench image)
    proxy_url: str | None  # how commands inside reach the proxy (None: they cannot)

    @classmethod
    def sandboxes(cls, settings: Any) -> bool:
        """Whether a session with these settings runs in a sandbox (a rollout server may refuse one that
        does not); `sandboxed` says whether a started one did."""
        return True

    @classmethod
    def reap(cls, root: Path) -> list[str]:
        """What sessions under `root` (a node's folder) left running when their node died, removed; the node
        calls it as it starts. A kind whose sandboxes die with the node (bubblewrap's --die-with-parent) has
        nothing to reap."""
        return []

    @classmethod
    def image_ref(cls, image: str) -> str:
        """A registry image name (`python:3.11`) as this kind's `image` setting writes it."""
        return image

    def inside(self) -> Inside:
        """What a harness's launch is written against."""
        return Inside(self.inside_home, self.inside_work, self.inside_tools, self.inside_scripts, self.path)

    @classmethod
    def make(cls, settings: Any, *, spec: RuntimeSpec, root: Path, session_id: str, proxy_url: str) -> Self:
        """One session's runtime: its kind's `settings`, the task's `runtime` block, under the node's `root`."""
        return cls(spec, settings, root, session_id, proxy_url)  # type: ignore[call-arg]

    @property
    @abstractmethod
    def sandboxed(self) -> bool: ...

    @abstractmethod
    async def start(self) -> None: ...

    @abstractmethod
    async def exec(
        self, argv: list[str], env: dict[str, str] | None = None, timeout: float | None = None
    ) -> tuple[int, str, str]:
        """Run to completion; at `timeout` the whole process group is killed and rc is TIMEOUT_RC."""

    @abstractmethod
    async def stop(self) -> None: ...

    def unseen(self, argv: list[str]) -> list[str]:
        """The host paths `argv` names (its words, and those of a `sh -c` script) that exist here but not in the
        sandbox: a harness started with one fails inside, so the node says which (runtime.volumes binds them)."""
        return []

    async def quiesce(self) -> list[str]:
        """Every process the agent started gone, before anything grades its work: what was still running
        (and is now killed). The gateway calls it once the agent has ended, whatever the harness did."""
        return []

    async def changed_outside(self) -> list[str] | None:
        """The paths outside the working copy and HOME the session changed in its sandbox (None: this kind
        cannot tell). A verifier that shares the agent's environment runs with them."""
        return None

    containment: Containment | None = None  # how this kind holds the session to `runtime.limits`, where it does

    def exceeded(self) -> str | None:
        """The limit (`runtime.limits`) the session passed, once its agent has ended; None: none."""
        return None if self.containment is None else self.containment.exceeded()


def inside_path(path: str, what: str) -> str:
    """`path` when it is absolute, not /, without .., and not under `RESERVED`."""
    if not path.startswith("/") or path.rstrip("/") == "" or ".." in path.split("/"):
        raise ValueError(f"{what}: {path!r} must be an absolute path inside, not / and without ..")
    if path.rstrip("/") == RESERVED or path.startswith(RESERVED + "/"):
        raise ValueError(f"{what}: {path!r} is under {RESERVED}, where the runtimes mount their own folders")
    return path


def parse_volume(volume: str) -> tuple[str, str, bool]:
    """`HOST:INSIDE[:ro|rw]` as (host, inside, writable); read-only unless `:rw`."""
    parts = volume.split(":")
    if len(parts) == 2:
        parts.append("ro")
    if len(parts) != 3 or parts[2] not in ("ro", "rw") or not parts[0].startswith("/"):
        raise ValueError(f"runtime.volumes: {volume!r} is not HOST:INSIDE[:ro|rw] with absolute paths")
    inside_path(parts[1], "runtime.volumes")
    return parts[0], parts[1], parts[2] == "rw"


class Placed(Strict):
    """What every kind's settings share: the session's limits, and the checks of `workdir` and `volumes` for those
    that declare them."""

    limits: Limits = Field(
        default_factory=Limits,
        description="what one session may use of the node: processes, memory, disk, output (containment.py)",
    )

    @field_validator("workdir", check_fields=False)
    @classmethod
    def _workdir(cls, workdir: str | None) -> str | None:
        return None if workdir is None else inside_path(workdir, "runtime.workdir")

    @field_validator("volumes", check_fields=False)
    @classmethod
    def _volumes(cls, volumes: list[str]) -> list[str]:
        for volume in volumes:
            parse_volume(volume)
        return volumes


class ContainerSettings(Placed):
    """What a runtime that runs an image takes (docker, apptainer, image)."""

    image: str = Field(
        description="docker: an image name; apptainer: a .sif file or URI (docker://...); image: a root "
        "filesystem folder, or several joined by ':' (the first on top)",
    )
    workdir: str | None = Field(
        None,
        description="where the agent works, e.g. /testbed: the image's own folder, or `repo` copied there "
        "(default /polar/work)",
    )
    volumes: list[str] = Field(
        default_factory=list, description="more binds, HOST:INSIDE[:ro|rw] (read-only by default)"
    )

    @property
    def binds(self) -> list[tuple[str, str, bool]]:
        """`volumes` as (host, inside, writable)."""
        return [parse_volume(v) for v in self.volumes]


class EngineSettings(ContainerSettings):
    """An engine's resource limits beside the image (docker, apptainer)."""

    cpus: float | None = Field(None, gt=0, description="CPU limit")
    memory: str | None = Field(
        None, pattern=r"^[0-9]+[bkmgBKMG]?$", description="memory limit, e.g. 2g or 512m (null: runtime.limits.memory)"
    )
    gpus: int = Field(0, ge=0, description="docker: that many GPUs (device requests); apptainer: --nv when > 0")


class ContainerRuntime(Runtime):
    """What docker, apptainer and image share: the session's folders under `root`, bound at fixed paths
    inside with the harness toolchain and our scripts (read-only), the task's working directory and
    environment, and for network "proxy" the tunnel to the proxy (network "host" reaches it directly).

    The agent works in `workdir` (default /polar/work): a copy of `spec.repo` bound there, or, with no
    repo, the image's own folder (e.g. SWE-bench's /testbed), where `work` is None and the patch is read
    inside."""

    in_image = True

    Settings = ContainerSettings

    def __init__(
        self, spec: RuntimeSpec, settings: ContainerSettings, root: str | Path, session_id: str, proxy_url: str | None
    ) -> None:
        self.spec, self.settings = spec, settings
        self.folder = Path(root).resolve() / session_id
        self.home = self.folder / "home"
        self.work = self.folder / "work" if spec.repo or not settings.workdir else None
        self.inside_work, self.inside_home = Path(settings.workdir or CONTAINER_WORK), CONTAINER_HOME
        self.inside_tools, self.inside_scripts = CONTAINER_TOOLS, CONTAINER_SCRIPTS
        self.path = spec.env.get("PATH", DEFAULT_PATH)  # the image's own, where it says, once started
        self.tunnel: ProxyTunnel | None = None
        self.proxy_url, self.listen = (proxy_url if spec.network == "host" else None), []
        if spec.network == "proxy" and proxy_url:
            self.proxy_url, self.listen = inside_url(proxy_url)
            self.tunnel = ProxyTunnel(proxy_url, self.folder)

    @property
    def sandboxed(self) -> bool:
        return True

    def binds(self) -> list[Bind]:
        """Every folder bound into the sandbox: HOME, the working copy (when it is ours), the toolchain and
        our scripts, the tunnel's socket folder, and the task's volumes."""
        out = [Bind(self.home, self.inside_home, True)]
        if self.work is not None:
            out.append(Bind(self.work, self.inside_work, True))
        if toolchain.TOOLS.is_dir():
            out.append(Bind(toolchain.TOOLS.resolve(), CONTAINER_TOOLS))
        out.append(Bind(toolchain.SCRIPTS, CONTAINER_SCRIPTS))
        if self.tunnel is not None and self.tunnel.folder is not None:
            out.append(Bind(self.tunnel.folder, Path(IN_SOCKET_DIR)))  # connect() needs no write access
        out += [Bind(Path(host), Path(inside), rw) for host, inside, rw in self.settings.binds]
        return out

    def python(self) -> str:
        """The Python that runs our scripts inside: the toolchain's, else the image's python3."""
        return str(CONTAINER_TOOLS / toolchain.PYTHON) if (toolchain.TOOLS / toolchain.PYTHON).exists() else "python3"

    def forwarded(self, argv: list[str], ready: bool = False) -> list[str]:
        """`argv` behind the proxy forwarder (network "proxy"), else as it is."""
        if not self.listen:
            return list(argv)
        return forward_argv(self.python(), IN_FORWARD, self.listen, f"{IN_SOCKET_DIR}/proxy.sock", argv, ready)

    def command_env(self, env: dict[str, str] | None) -> dict[str, str]:
        """A command's environment: HOME, the task's env, then the command's own."""
        return {"HOME": str(self.inside_home)} | self.spec.env | (env or {})

    async def _prepare(self) -> None:
        """The session's folders (a copy of `spec.repo` as its working copy) and the tunnel's socket."""
        repo = Path(self.spec.repo) if self.spec.repo else None
        await asyncio.to_thread(make_folders, self.folder, self.work, self.home, repo, self.spec.commit)
        if self.tunnel is not None:
            await self.tunnel.start()

    async def cut_history(self) -> None:
        """The image's own repository, when the agent works in it, cut at the task's commit by history.py's
        script as the sandbox sees it: the last step of every kind's `start`, before any set-up step or the
        agent. A failure (an image whose folder is a repository but that has no git) stops the start: such
        a session must not run, or its agent could read the future."""
        if self.work is not None:
            return
        commit = self.spec.commit or "HEAD"
        script = self.inside_scripts / history.SCRIPT.name
        rc, out, err = await self.exec(["sh", str(script), commit], None, history.TIMEOUT_S)
        if rc != 0:
            why = (err or out).strip()[-1000:]
            raise SandboxError(f"cutting the history of {self.inside_work} at {commit} failed (rc {rc}): {why}")


ARCHIVE = "archive.py"  # inside/archive.py: a working copy packed in one sandbox, unpacked in another
WORK_ARCHIVE = ".polar-work.tar"  # in HOME, on its way


async def copy_work(source: ContainerRuntime, dest: ContainerRuntime) -> None:
    """`source`'s working copy, as its session left it, made `dest`'s (a fresh sandbox of the same image, with
    nothing else of the session): copied on this machine when both are folders here, else packed by our
    script in `source` and unpacked by it in `dest` (what would leave the folder is left out)."""
    if source.work is not None and dest.work is not None:
        await asyncio.to_thread(_replace_folder, source.work, dest.work)
        return
    for box, argv in (
        (source, ["pack", str(source.inside_work), str(source.inside_home / WORK_ARCHIVE)]),
        (dest, ["unpack", str(dest.inside_home / WORK_ARCHIVE), str(dest.inside_work)]),
    ):
        if box is dest:
            await asyncio.to_thread(shutil.move, source.home / WORK_ARCHIVE, dest.home / WORK_ARCHIVE)
        script = [box.python(), "-I", "-S", str(box.inside_scripts / ARCHIVE), *argv]
        rc, out, err = await box.exec(script, None, 600)
        if rc != 0:
            raise SandboxError(f"carrying the working copy: {argv[0]} failed (rc {rc}): {(err or out).strip()[-500:]}")
    (dest.home / WORK_ARCHIVE).unlink(missing_ok=True)


def _replace_folder(source: Path, dest: Path) -> None:
    shutil.rmtree(dest)
    shutil.copytree(source, dest, symlinks=True)


def outside(paths: list[str], work: Path, limit: int = 200) -> list[str]:
    """The changed `paths` (absolute, sorted) that are not the working copy, our own folders (/polar), or a
    folder holding another changed path (an engine lists the parents of what changed as changed too); at most
    `limit`, then how many more."""
    keep = []
    for i, path in enumerate(paths):
        under = path == str(work) or path.startswith(str(work).rstrip("/") + "/")
        ours = path == RESERVED or path.startswith(RESERVED + "/")
        parent = i + 1 < len(paths) and paths[i + 1].startswith(path.rstrip("/") + "/")
        if not (under or ours or parent):
            keep.append(path)
    return keep[:limit] + ([f"... and {len(keep) - limit} more"] if len(keep) > limit else [])


def make_folders(folder: Path, work: Path | None, home: Path, repo: Path | None, commit: str | None = None) -> None:
    """The session's folder: HOME, and the working copy, a copy of `repo` cut at `commit` (history.py)."""
    folder.mkdir(parents=True, exist_ok=False)  # a reused id would mix two sessions' files
    if work is not None and repo is not None:
        history.copy_repo(repo, work, commit)
    elif work is not None:
        work.mkdir()
    home.mkdir()


def remove_tree(path: Path) -> None:
    """rmtree that also removes what a sandbox left unwritable (overlayfs's work folders are mode 000)."""

    def retry(func, name, _exc) -> None:
        try:
            os.chmod(os.path.dirname(name), 0o700)
            os.chmod(name, 0o700)
            func(name)
        except OSError:
            pass

    shutil.rmtree(path, onerror=retry)


# --- the proxy, seen from inside a sandbox without a network ------------------------------------
def proxy_address(proxy_url: str) -> tuple[str, int]:
    """Where the host reaches the proxy (a wildcard listen address means this machine)."""
    parts = urlsplit(proxy_url)
    host = parts.hostname or "127.0.0.1"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return ("127.0.0.1" if host in ("0.0.0.0", "::") else host), port


def inside_url(proxy_url: str) -> tuple[str, list[str]]:
    """The proxy's URL inside a sandbox whose only network is its own loopback, and the addresses
    the forwarder listens on. A loopback URL stays as it is, so harness configs mean the same inside
    and out; any other host is rewritten to 127.0.0.1 (it does not exist in the namespace)."""
    parts = urlsplit(proxy_url)
    host, port = parts.hostname or "127.0.0.1", parts.port or (443 if parts.scheme == "https" else 80)
    if host == "localhost":  # clients may try ::1 first
        return proxy_url, [f"127.0.0.1:{port}", f"[::1]:{port}"]
    if host == "0.0.0.0":  # connecting to 0.0.0.0 reaches 127.0.0.1 on Linux
        return proxy_url, [f"127.0.0.1:{port}"]
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if loopback:
        return proxy_url, [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    url = urlunsplit((parts.scheme, f"127.0.0.1:{port}", parts.path, parts.query, parts.fragment))
    return url, [f"127.0.0.1:{port}"]


def forward_argv(
    python: str, script: str, listen: list[str], unix_path: str, argv: list[str], ready: bool = False
) -> list[str]:
    """The command wrapped in the forwarder. -I -S: no site-packages, user paths or PYTHON*
    variables: it starts fast and nothing in the sandbox can change what it runs."""
    return [python, "-I", "-S", script, *(["--ready"] if ready else []), ",".join(listen), unix_path, "--", *argv]


class ProxyTunnel:
    """The host end: a Unix socket (in a short private folder, bind-mounted into the sandbox), each
    connection piped to the proxy's TCP address. One per runtime, in the gateway's event loop."""

    def __init__(self, proxy_url: str, near: Path):
        self.target = proxy_address(proxy_url)
        self.near = near / "tunnel"  # in the session folder: swept with it, even after a crash
        self.folder: Path | None = None
        self.server: asyncio.AbstractServer | None = None
        self._conns: set[asyncio.StreamWriter] = set()

    @property
    def socket_path(self) -> Path:
        assert self.folder is not None
        return self.folder / "proxy.sock"

    async def start(self) -> None:
        # a Unix socket path has at most 107 bytes: a deep session folder falls back to /tmp
        if len(str(self.near / "proxy.sock")) < 100:
            self.near.mkdir()
            self.folder = self.near
        else:
            self.folder = Path(tempfile.mkdtemp(prefix="polar-", dir="/tmp" if os.path.isdir("/tmp") else None))
        self.folder.chmod(0o755)  # a container user other than ours must reach the socket
        self.server = await asyncio.start_unix_server(self._handle, path=str(self.socket_path))
        self.socket_path.chmod(0o666)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._conns.add(writer)
        try:
            await forward.splice(reader, writer, asyncio.ensure_future(asyncio.open_connection(*self.target)))
        finally:
            self._conns.discard(writer)

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            for writer in list(self._conns):
                writer.close()
            await self.server.wait_closed()
            self.server = None
        if self.folder is not None:
            await asyncio.to_thread(shutil.rmtree, self.folder, True)
            self.folder = None
