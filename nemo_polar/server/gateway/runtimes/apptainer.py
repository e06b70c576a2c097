"""`ApptainerRuntime`: an Apptainer instance per session, for clusters without a docker engine.

`apptainer instance start --containall` with a per-session writable overlay folder (writes outside
the binds land there and go with the session), the working copy and HOME bound at their host paths,
`--net --network none` unless network is "host". For network "proxy", a long-lived forward.py runs
in the instance (started with `exec`, ready once it prints its line) and bridges 127.0.0.1:PORT to
the gateway's Unix socket, bound in. Each command is `apptainer exec --cleanenv instance://NAME`
(the gateway's own environment, credentials included, stays out) in its own process group on the
host, killed at its deadline. `stop()` kills the forwarder and runs `instance stop`.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from pathlib import Path

from ....contracts import RuntimeSpec
from ....sandbox import kill_group, run_group
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

START_TIMEOUT_S = 120.0


def apptainer_binary() -> str | None:
    return os.environ.get("POLAR_APPTAINER_BIN") or shutil.which("apptainer")


def instance_name(session_id: str) -> str:
    return "polar-" + re.sub(r"[^a-zA-Z0-9_-]", "-", session_id)[:80]


def start_argv(
    binary: str,
    spec: RuntimeSpec,
    name: str,
    work: Path,
    home: Path,
    overlay: Path,
    socket_dir: Path | None = None,
) -> list[str]:
    """`apptainer instance start ...` for one session (a pure function)."""
    argv = [binary, "instance", "start", "--containall", "--overlay", str(overlay)]
    argv += ["--home", f"{home}:{CONTAINER_HOME}", "--bind", f"{work}:{CONTAINER_WORK}", "--pwd", str(CONTAINER_WORK)]
    if spec.network != "host":
        argv += ["--net", "--network", "none"]
    if spec.network == "proxy":
        assert socket_dir is not None, "network proxy needs the tunnel's socket folder"
        argv += ["--bind", f"{socket_dir}:{IN_SOCKET_DIR}:ro", "--bind", f"{FORWARD_SCRIPT}:{IN_FORWARD}:ro"]
    if spec.cpus is not None:
        argv += ["--cpus", str(spec.cpus)]
    if spec.memory is not None:
        argv += ["--memory", spec.memory]
    return [*argv, "--env", f"HOME={CONTAINER_HOME}", str(spec.image), name]


def exec_argv(binary: str, name: str, argv: list[str], env: dict[str, str]) -> list[str]:
    """`apptainer exec` of one command in the instance. `env K=V` rather than `--env`, which splits
    its value at commas."""
    pairs = [f"{k}={v}" for k, v in ({"HOME": str(CONTAINER_HOME)} | env).items()]
    return [binary, "exec", "--cleanenv", "--pwd", str(CONTAINER_WORK), f"instance://{name}", "env", *pairs, *argv]


def stop_argv(binary: str, name: str) -> list[str]:
    return [binary, "instance", "stop", "--force", name]


class ApptainerRuntime(ContainerRuntime):
    def __init__(self, spec: RuntimeSpec, root: str | Path, session_id: str, proxy_url: str | None) -> None:
        binary = apptainer_binary()
        if binary is None:
            raise RuntimeError("runtime.kind apptainer: no `apptainer` on PATH (or set POLAR_APPTAINER_BIN)")
        super().__init__(spec, root, session_id, proxy_url)
        self.binary, self.name, self.overlay = binary, instance_name(session_id), self.folder / "overlay"
        self.started = False
        self.forwarder: asyncio.subprocess.Process | None = None
        self._live: set[int] = set()

    def _env(self) -> dict[str, str]:
        # apptainer itself needs ours (instance records, cache); --cleanenv keeps it out of the instance
        return dict(os.environ)

    async def start(self) -> None:
        try:
            await self._prepare()
            self.overlay.mkdir()
            argv = start_argv(
                self.binary,
                self.spec,
                self.name,
                self.work,
                self.home,
                self.overlay,
                self.tunnel and self.tunnel.folder,
            )
            self.started = True  # from here on stop() must stop the instance, even if starting failed
            rc, out, err = await run_group(argv, self._env(), None, START_TIMEOUT_S)
            if rc != 0:
                raise RuntimeError(f"apptainer instance start failed ({rc}): {(err or out)[-2000:]}")
            if self.tunnel is not None:
                await self._start_forwarder()
        except BaseException:
            await self.stop()
            raise

    async def _start_forwarder(self) -> None:
        sock = f"{IN_SOCKET_DIR}/proxy.sock"
        inner = forward_argv("python3", IN_FORWARD, self.listen, sock, ["sleep", "infinity"], ready=True)
        argv = exec_argv(self.binary, self.name, inner, {})
        proc = await asyncio.create_subprocess_exec(
            *argv, env=self._env(), start_new_session=True, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        self.forwarder = proc
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), START_TIMEOUT_S)
        except TimeoutError:
            line = b""
        if forward.READY not in line.decode(errors="replace"):
            kill_group(proc.pid)
            err = await proc.stderr.read()
            raise RuntimeError(
                f"the proxy forwarder did not start in {self.spec.image!r} (it needs python3; or use "
                f"runtime.network=host): {err.decode(errors='replace')[-2000:]}"
            )

    async def exec(
        self, argv: list[str], env: dict[str, str] | None = None, timeout: float | None = None
    ) -> tuple[int, str, str]:
        full = exec_argv(self.binary, self.name, argv, env or {})
        return await run_group(full, self._env(), None, timeout, self._live.add, self._live.discard)

    async def stop(self) -> None:
        try:
            for pid in list(self._live):
                kill_group(pid)
            if self.forwarder is not None:
                kill_group(self.forwarder.pid)
                await self.forwarder.wait()
                self.forwarder = None
            if self.started:
                self.started = False
                await run_group(stop_argv(self.binary, self.name), self._env(), None, 60)
        finally:
            if self.tunnel is not None:
                await self.tunnel.stop()
            await asyncio.to_thread(shutil.rmtree, self.folder, True)
