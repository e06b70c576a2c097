"""`DockerRuntime`: a container per session from the task's image, through the Docker SDK.

The working copy and HOME are host folders bind-mounted at the same paths (configs written on the
host mean the same inside). Network "proxy" is `network_mode="none"` plus forward.py as the
container's first process, bridging 127.0.0.1:PORT to the gateway's Unix socket (bind-mounted).
Trade-off, chosen over an internal docker network: no route to anything at all, not even other
sessions' containers or the docker host, and no network objects to create or leak; the price is that
the image needs a `python3` (checked at start, with a clear error). Images without one can use
network "host" (no isolation) until a static forwarder exists.

Each exec runs under `timeout -k 2 T` (coreutils or busybox): it puts the command in its own
process group and signals the whole group at the deadline. `stop()` removes the container with
everything still running in it; so does a failed `start()`.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

from ....contracts import RuntimeSpec
from ....sandbox import TIMEOUT_RC
from . import forward
from .base import (
    CONTAINER_HOME,
    CONTAINER_WORK,
    FORWARD_SCRIPT,
    IN_FORWARD,
    IN_SOCKET_DIR,
    ContainerRuntime,
    forward_argv,
)

START_TIMEOUT_S = 60.0
KILL_AFTER_S = 2


def container_name(session_id: str) -> str:
    return "polar-" + re.sub(r"[^a-zA-Z0-9_.-]", "-", session_id)[:100]


def container_kwargs(
    spec: RuntimeSpec,
    name: str,
    work: Path,
    home: Path,
    socket_dir: Path | None = None,
    listen: list[str] | None = None,
    user: str | None = None,
) -> dict[str, Any]:
    """The keyword arguments of `client.containers.run` for one session (a pure function)."""
    volumes = {
        str(work): {"bind": str(CONTAINER_WORK), "mode": "rw"},
        str(home): {"bind": str(CONTAINER_HOME), "mode": "rw"},
    }
    command = ["sleep", "infinity"]
    if spec.network == "proxy":
        assert socket_dir is not None and listen, "network proxy needs the tunnel's socket folder"
        volumes[str(socket_dir)] = {"bind": IN_SOCKET_DIR, "mode": "ro"}
        volumes[str(FORWARD_SCRIPT)] = {"bind": IN_FORWARD, "mode": "ro"}
        command = forward_argv("python3", IN_FORWARD, listen, f"{IN_SOCKET_DIR}/proxy.sock", command, ready=True)
    kwargs: dict[str, Any] = {
        "image": spec.image,
        "name": name,
        "command": command,
        "detach": True,
        "init": True,  # reaps the zombies of exec'd commands
        "network_mode": "host" if spec.network == "host" else "none",
        "volumes": volumes,
        "working_dir": str(CONTAINER_WORK),
        "environment": {"HOME": str(CONTAINER_HOME)},
        "labels": {"nemo_polar.session": name},
        "user": user,  # the gateway's uid: files in the working copy stay ours to read and remove
    }
    if spec.cpus is not None:
        kwargs["nano_cpus"] = int(spec.cpus * 1e9)
    if spec.memory is not None:
        kwargs["mem_limit"] = kwargs["memswap_limit"] = spec.memory  # equal: no swap on top
    return kwargs


def exec_argv(argv: list[str], timeout: float | None) -> list[str]:
    if timeout is None:
        return list(argv)
    return ["timeout", "-k", str(KILL_AFTER_S), f"{timeout:.3f}", *argv]


class DockerRuntime(ContainerRuntime):
    def __init__(self, spec: RuntimeSpec, root: str | Path, session_id: str, proxy_url: str | None) -> None:
        import docker  # the `docker` extra

        super().__init__(spec, root, session_id, proxy_url)
        self.name = container_name(session_id)
        self.client = docker.from_env()
        self.container = None

    async def start(self) -> None:
        try:
            await self._prepare()
            kwargs = container_kwargs(
                self.spec,
                self.name,
                self.work,
                self.home,
                self.tunnel.folder if self.tunnel else None,
                self.listen,
                f"{os.getuid()}:{os.getgid()}",
            )
            self.container = await asyncio.to_thread(self.client.containers.run, **kwargs)
            if self.tunnel is not None:
                await asyncio.to_thread(self._wait_ready)
        except BaseException:
            await self.stop()
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            self.container.reload()
            logs = self.container.logs().decode(errors="replace")
            if forward.READY in logs:
                return
            if self.container.status == "exited":
                raise RuntimeError(
                    f"the proxy forwarder did not start in image {self.spec.image!r} (it needs python3; "
                    f"or use runtime.network=host): {logs[-2000:]}"
                )
            time.sleep(0.05)
        raise TimeoutError(f"the proxy forwarder in {self.name} was not ready after {START_TIMEOUT_S:.0f} s")

    async def exec(
        self, argv: list[str], env: dict[str, str] | None = None, timeout: float | None = None
    ) -> tuple[int, str, str]:
        assert self.container is not None, "start() first"
        t0 = time.monotonic()
        run = asyncio.to_thread(
            self.container.exec_run,
            exec_argv(argv, timeout),
            environment={"HOME": str(CONTAINER_HOME)} | (env or {}),
            workdir=str(CONTAINER_WORK),
            demux=True,
        )
        # a backstop past the in-container deadline: a wedged exec is ended by stop() removing the container
        try:
            result = await asyncio.wait_for(run, None if timeout is None else timeout + KILL_AFTER_S + 10)
        except TimeoutError:
            return TIMEOUT_RC, "", "(exec did not return after its deadline)"
        out, err = result.output or (None, None)
        rc = result.exit_code
        if timeout is not None and rc in (124, 137) and time.monotonic() - t0 >= timeout:
            rc = TIMEOUT_RC
        return rc, (out or b"").decode(errors="replace"), (err or b"").decode(errors="replace")

    async def stop(self) -> None:
        try:
            if self.container is not None:
                container, self.container = self.container, None
                await asyncio.to_thread(_remove, container)
            else:  # a start that failed before `run` returned may still have created it
                await asyncio.to_thread(_remove_by_name, self.client, self.name)
        finally:
            if self.tunnel is not None:
                await self.tunnel.stop()
            await asyncio.to_thread(shutil.rmtree, self.folder, True)


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
