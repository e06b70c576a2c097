"""`DockerRuntime`: a container per session from the task's image, through the Docker SDK.

HOME (and the working copy, when the task brings its repo) are host folders bind-mounted at fixed
paths; the harness toolchain and our scripts are bound read-only at /polar/tools and /polar/scripts, so
a harness needs nothing from the image. The agent works in `runtime.workdir` (the image's own folder,
e.g. /testbed, when the task has no repo; the container then runs as the image's user, and HOME is
handed back to the gateway's uid before the container goes). Network "proxy" is `network_mode="none"`
plus forward.py (run by the toolchain's Python) as the container's first process, bridging
127.0.0.1:PORT to the gateway's Unix socket (bind-mounted). Trade-off, chosen over an internal docker
network: no route to anything at all, not even other sessions' containers or the docker host, and no
network objects to create or leak.

Each exec runs under `timeout -k 2 T` (coreutils or busybox): it puts the command in its own
process group and signals the whole group at the deadline. `stop()` removes the container with
everything still running in it; so does a failed `start()`.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from ..containment import Containment, Kept, size_bytes
from ..errors import ConfigError, SandboxError
from ..sandbox import TIMEOUT_RC
from .base import CONTAINER_HOME, DEFAULT_PATH, Bind, ContainerRuntime, EngineSettings, outside, remove_tree
from .dockerfile import Dockerfile
from .inside import forward
from .spec import RuntimeSpec

START_TIMEOUT_S = 60.0
# what the engine itself puts in every container (`init`: its docker-init), never the session's change
ENGINE_MOUNTS = frozenset({"/sbin/docker-init", "/usr/sbin/docker-init"})
KILL_AFTER_S = 2
log = logging.getLogger("nemo_polar.gateway")


def container_name(session_id: str) -> str:
    return "polar-" + re.sub(r"[^a-zA-Z0-9_.-]", "-", session_id)[:100]


BUILT = "polar-build"  # the repository of images built from a context, tagged by its content
SESSION_LABEL = "nemo_polar.session"
ROOT_LABEL = "nemo_polar.root"  # the node's folder: a node that restarts finds its own containers, and no other's


class DockerSettings(EngineSettings):
    image: str | None = Field(None, description="an image name (or `build`)")  # type: ignore[assignment]
    build: str | None = Field(
        None,
        description="a build context holding a Dockerfile (e.g. a Harbor task's environment/): built on the node's "
        "engine, once per content, and run",
    )

    @model_validator(mode="after")
    def _one_source(self) -> DockerSettings:
        if (self.image is None) == (self.build is None):
            raise ValueError("docker takes runtime.image or runtime.build (a folder with a Dockerfile), one of them")
        return self


# What a harness and a task's `prepare` steps do as root in their container: own and write any file (chown, chmod,
# pip and npm installs), signal their own processes, drop to a user (apt's _apt, su), bind a port below 1024.
CAPABILITIES = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "NET_BIND_SERVICE")


def container_kwargs(
    spec: RuntimeSpec,
    settings: EngineSettings,
    name: str,
    binds: list[Bind],
    command: list[str],
    workdir: str,
    user: str | None = None,
    root: str = "",
) -> dict[str, Any]:
    """The keyword arguments of `client.containers.run` for one session (a pure function)."""
    kwargs: dict[str, Any] = {
        "image": settings.image,
        "name": name,
        "command": command,
        "detach": True,
        "init": True,  # reaps the zombies of exec'd commands
        "network_mode": "host" if spec.network == "host" else "none",
        "volumes": {str(b.host): {"bind": str(b.inside), "mode": "rw" if b.writable else "ro"} for b in binds},
        "working_dir": workdir,
        "environment": {"HOME": str(CONTAINER_HOME)} | spec.env,
        "labels": {SESSION_LABEL: name, ROOT_LABEL: root},
        "user": user,  # the gateway's uid: files in the working copy stay ours to read and remove
    }
    # root in the container, without what no harness needs (raw sockets, device nodes, chroot, file capabilities,
    # audit) and unable to gain more (setuid binaries): runtime.limits' processes and memory hold as in local
    kwargs |= {"cap_drop": ["ALL"], "cap_add": list(CAPABILITIES), "security_opt": ["no-new-privileges"]}
    if settings.limits.processes is not None:
        kwargs["pids_limit"] = settings.limits.processes
    if settings.cpus is not None:
        kwargs["nano_cpus"] = int(settings.cpus * 1e9)
    if (memory := settings.memory or settings.limits.memory) is not None:
        kwargs["mem_limit"] = kwargs["memswap_limit"] = memory  # equal: no swap on top
    if settings.gpus:
        kwargs["device_requests"] = [{"Driver": "", "Count": settings.gpus, "Capabilities": [["gpu"]]}]
    return kwargs


def exec_argv(argv: list[str], timeout: float | None) -> list[str]:
    if timeout is None:
        return list(argv)
    return ["timeout", "-k", str(KILL_AFTER_S), f"{timeout:.3f}", *argv]


class DockerRuntime(ContainerRuntime):
    name = "docker"
    Settings = DockerSettings
    settings: DockerSettings
    pulls = True

    def __init__(
        self, spec: RuntimeSpec, settings: EngineSettings, root: str | Path, session_id: str, proxy_url: str | None
    ) -> None:
        import docker  # the `docker` extra

        super().__init__(spec, settings, root, session_id, proxy_url)
        self.root = str(Path(root).resolve())
        self.instance = container_name(session_id)
        self.client = docker.from_env()
        self.container = None
        # the engine limits processes and memory (container_kwargs); disk and output are measured here
        self.containment = Containment(self.instance, settings.limits, [self.folder], self._layer_size)

    def _layer_size(self) -> int:
        """What the container wrote to its own layer, as the engine counts it."""
        if self.container is None:
            return 0
        listed = self.client.api.containers(all=True, size=True, filters={"id": self.container.id})
        return sum(c.get("SizeRw") or 0 for c in listed)

    @classmethod
    def available(cls) -> bool:
        """Whether an engine answers where the docker SDK looks (DOCKER_HOST, else the default socket)."""
        try:
            import docker

            return bool(docker.from_env(timeout=5).ping())
        except Exception:  # noqa: BLE001 - no SDK or no engine: not available
            return False

    @classmethod
    def reap(cls, root: Path) -> list[str]:
        """The containers labelled with `root` (a node's folder) that a node killed mid-session left, removed.
        Nothing when the docker SDK or an engine is not there: then there is nothing of ours to find."""
        try:
            import docker

            client = docker.from_env(timeout=10)
            found = client.containers.list(all=True, filters={"label": f"{ROOT_LABEL}={Path(root).resolve()}"})
        except Exception:  # noqa: BLE001 - no SDK, no engine: no container of ours either
            return []
        for container in found:
            _remove(container)
        return [c.name for c in found]

    @property
    def user(self) -> str | None:
        """The gateway's uid, unless the agent works in the image's own folder (its owner's, e.g. root's)."""
        return None if self.work is None else f"{os.getuid()}:{os.getgid()}"

    async def start(self) -> None:
        try:
            if self.settings.build is not None:
                image = await asyncio.to_thread(built_image, self.client, Path(self.settings.build))
                self.settings = self.settings.model_copy(update={"image": image})
            await self._prepare()
            command = self.forwarded(["sleep", "infinity"], ready=True)
            kwargs = container_kwargs(
                self.spec,
                self.settings,
                self.instance,
                self.binds(),
                command,
                str(self.inside_work),
                self.user,
                self.root,
            )
            self.container = await asyncio.to_thread(self.client.containers.run, **kwargs)
            await asyncio.to_thread(self.container.reload)  # `run` returns what `create` said: no pid yet
            if pid := self.container.attrs["State"]["Pid"]:
                self.containment.adopt(pid)
            if self.tunnel is not None:
                await asyncio.to_thread(self._wait_ready)
            self.path = image_path(self.container.attrs, self.spec)
            await self.cut_history()
        except BaseException:
            await self.stop()
            raise

    def _wait_ready(self, seen: int = 0) -> None:
        """Until the forwarder has said it is ready once more than `seen` times (a restart says it again)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            self.container.reload()
            logs = self.container.logs().decode(errors="replace")
            if logs.count(forward.READY) > seen:
                return
            if self.container.status == "exited":
                raise RuntimeError(
                    f"the proxy forwarder did not start in image {self.settings.image!r} (the toolchain's Python, "
                    f"scripts/setup.sh mini, or the image's python3): {logs[-2000:]}"
                )
            time.sleep(0.05)
        raise TimeoutError(f"the proxy forwarder in {self.instance} was not ready after {START_TIMEOUT_S:.0f} s")

    async def exec(
        self, argv: list[str], env: dict[str, str] | None = None, timeout: float | None = None
    ) -> tuple[int, str, str]:
        assert self.container is not None, "start() first"
        t0 = time.monotonic()
        api = self.client.api
        created = await asyncio.to_thread(
            api.exec_create,
            self.container.id,
            exec_argv(argv, timeout),
            environment=self.command_env(env),
            workdir=str(self.inside_work),
        )
        exec_id = created["Id"]
        # a backstop past the in-container deadline: a wedged exec is ended by stop() removing the container
        try:
            async with self.containment.watching(lambda: self._kill_exec(exec_id)):
                out, err = await asyncio.wait_for(
                    asyncio.to_thread(self._read_exec, exec_id),
                    None if timeout is None else timeout + KILL_AFTER_S + 10,
                )
        except TimeoutError:
            return TIMEOUT_RC, "", "(exec did not return after its deadline)"
        rc = (await asyncio.to_thread(api.exec_inspect, exec_id))["ExitCode"]
        if timeout is not None and rc in (124, 137) and time.monotonic() - t0 >= timeout:
            rc = TIMEOUT_RC
        return rc, out.decode(errors="replace"), err.decode(errors="replace")

    def _read_exec(self, exec_id: str) -> tuple[bytes, bytes]:
        """The exec's stdout and stderr as they come, kept up to `runtime.limits.output` together: past it the exec
        is killed and the rest dropped (an endless stream costs the node nothing)."""
        box = self.containment
        kept = Kept(size_bytes(box.limits.output), lambda: (box.output_over(), self._kill_exec(exec_id)))
        out: tuple[list[bytes], list[bytes]] = ([], [])
        for pair in self.client.api.exec_start(exec_id, stream=True, demux=True):
            for chunk, into in zip(pair, out, strict=True):
                if chunk:
                    into.append(kept.take(chunk))
        return b"".join(out[0]), b"".join(out[1])

    def _kill_exec(self, exec_id: str) -> None:
        """The exec's process group killed (`timeout` leads it), from the host."""
        try:
            pid = self.client.api.exec_inspect(exec_id)["Pid"]
            if pid:
                os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        except Exception:  # noqa: BLE001 - the engine went: nothing left to kill
            log.warning("could not kill exec %s of %s", exec_id, self.instance, exc_info=True)

    async def quiesce(self) -> list[str]:
        """What ran in the container beyond our own processes, as the engine lists them (`docker top`, which no
        program of the image can change); when anything did, the container restarted (`restart -t 0`: all of it
        killed, its files kept, our forwarder started again) and checked again."""
        if self.container is None:
            return []
        return await asyncio.to_thread(self._restart)

    def _restart(self) -> list[str]:
        ready = self.container.logs().decode(errors="replace").count(forward.READY)
        left = [command for command in self._processes() if not self._ours(command)]
        if not left:  # nothing of the agent runs, so nothing can start again
            return left
        self.container.restart(timeout=0)
        if self.tunnel is not None:
            self._wait_ready(ready)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            after = [command for command in self._processes() if not self._ours(command)]
            if not after:
                return left
            if time.monotonic() > deadline:  # `runc init` shows for a moment after a start
                raise SandboxError(f"{self.instance} still runs processes of the agent after a restart: {after}")
            time.sleep(0.05)

    def _processes(self) -> list[str]:
        return [row[-1] for row in self.container.top(ps_args="-ww -eo pid,args")["Processes"] or []]

    def _ours(self, command: str) -> bool:
        """The container's init, our forwarder (and the child it serves from) or its `sleep infinity`."""
        forwarder = " ".join(self.forwarded(["sleep", "infinity"], ready=True))
        return command.startswith("/sbin/docker-init") or command in ("sleep infinity", forwarder)

    async def changed_outside(self) -> list[str] | None:
        """What the engine says changed in the container's own layer (`docker diff`), outside the working copy."""
        if self.container is None:
            return None
        changes = await asyncio.to_thread(self.container.diff)
        paths = sorted(c["Path"] for c in changes or [] if c["Path"] not in ENGINE_MOUNTS)
        return outside(paths, self.inside_work)

    async def stop(self) -> None:
        try:
            if self.container is not None:
                container, self.container = self.container, None
                if self.user is None:  # files the image's user wrote into HOME: the gateway's again
                    await asyncio.to_thread(_hand_back, container, f"{os.getuid()}:{os.getgid()}")
                await asyncio.to_thread(_remove, container)
            else:  # a start that failed before `run` returned may still have created it
                await asyncio.to_thread(_remove_by_name, self.client, self.instance)
        finally:
            if self.tunnel is not None:
                await self.tunnel.stop()
            await asyncio.to_thread(remove_tree, self.folder)


_BUILDS: dict[str, threading.Lock] = {}  # one build per content at a time: a group's sessions start together
_BUILDS_LOCK = threading.Lock()


def context_digest(context: Path) -> str:
    """What identifies a build: every file of its context, by path and content."""
    h = hashlib.sha256()
    for path in sorted(p for p in context.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(context)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def built_image(client: Any, context: Path) -> str:
    """The image built from `context` (its Dockerfile) on this engine, built now unless it already was. RUN steps
    reach the network the engine's host reaches (the sessions never do). A base image the engine lacks and cannot
    pull is a clear error naming it."""
    from docker.errors import APIError, BuildError, ImageNotFound

    if not (context / "Dockerfile").is_file():
        raise ConfigError(f"runtime.build: {context} holds no Dockerfile")
    tag = f"{BUILT}:{context_digest(context)}"
    with _BUILDS_LOCK:
        lock = _BUILDS.setdefault(tag, threading.Lock())
    with lock:
        try:
            client.images.get(tag)
            return tag
        except ImageNotFound:
            pass
        for base in Dockerfile.read(context / "Dockerfile").bases:
            try:
                client.images.get(base)
            except ImageNotFound:
                try:
                    client.images.pull(base)
                except APIError as exc:
                    raise ConfigError(
                        f"runtime.build: {context}/Dockerfile starts FROM {base}, which this engine does not have "
                        f"and cannot pull ({str(exc)[:200]}): load or tag it there first (e.g. `docker tag "
                        f"<a local image> {base}`)"
                    ) from None
        try:
            client.images.build(path=str(context), tag=tag, rm=True, forcerm=True, network_mode="host")
        except BuildError as exc:
            log = "".join(str(c.get("stream") or c.get("error") or "") for c in exc.build_log)[-2000:]
            raise ConfigError(f"runtime.build: building {context} failed: {exc.msg}\n{log}") from None
        return tag


def image_path(attrs: dict[str, Any], spec: RuntimeSpec) -> str:
    """PATH inside: the task's, else the image's own (its config's Env), else Debian's default."""
    for item in (attrs.get("Config") or {}).get("Env") or []:
        if item.startswith("PATH="):
            return spec.env.get("PATH", item.removeprefix("PATH="))
    return spec.env.get("PATH", DEFAULT_PATH)


def _hand_back(container: Any, owner: str) -> None:
    try:
        container.exec_run(["chown", "-R", owner, str(CONTAINER_HOME)], user="0")
    except Exception:  # noqa: BLE001 - best effort: the container goes anyway
        pass


def _remove(container: Any) -> None:
    from docker.errors import NotFound

    try:
        container.remove(force=True)
    except NotFound:
        pass


def _remove_by_name(client: Any, name: str) -> None:
    from docker.errors import NotFound

    try:
        client.containers.get(name).remove(force=True)
    except NotFound:
        pass
