"""`ApptainerRuntime`: an Apptainer instance per session, for clusters without a docker engine.

`apptainer instance start --containall` with a per-session writable overlay folder (writes outside
the binds land there and go with the session: the agent can work in the image's own folder, e.g.
SWE-bench's /testbed, which is root's: add `--fakeroot` through POLAR_APPTAINER_ARGS where the cluster
allows it), HOME and the working copy bound at fixed paths, the harness toolchain and our scripts
read-only at /polar/tools and /polar/scripts, the task's volumes, `--nv` for GPUs, `--net --network
none` unless network is "host". For network "proxy", a long-lived forward.py (the toolchain's Python)
runs in the instance (started with `exec`, ready once it prints its line) and bridges 127.0.0.1:PORT to
the gateway's Unix socket, bound in. Each command is `apptainer exec --cleanenv instance://NAME` with
the task's env (the gateway's own environment, credentials included, stays out) in its own process
group on the host, killed at its deadline. `stop()` kills the forwarder and runs `instance stop`.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
from pathlib import Path

from ..errors import SandboxError
from ..sandbox import ProcessGroups, kill_group, run_group
from .base import CONTAINER_HOME, Bind, ContainerRuntime, EngineSettings, remove_tree
from .inside import forward
from .spec import RuntimeSpec

START_TIMEOUT_S = 120.0
QUIESCE = ["sh", "-c", "kill -9 -1 2>/dev/null; exit 0"]  # every process the exec'ing shell may signal


def apptainer_binary() -> str | None:
    return os.environ.get("POLAR_APPTAINER_BIN") or shutil.which("apptainer")


def instance_name(session_id: str) -> str:
    return "polar-" + re.sub(r"[^a-zA-Z0-9_-]", "-", session_id)[:80]


def start_argv(
    binary: str,
    spec: RuntimeSpec,
    settings: EngineSettings,
    name: str,
    binds: list[Bind],
    overlay: Path,
    workdir: str,
    extra: list[str] = (),
) -> list[str]:
    """`apptainer instance start ...` for one session (a pure function)."""
    argv = [binary, "instance", "start", "--containall", "--overlay", str(overlay), *extra]
    for bind in binds:
        if bind.inside == CONTAINER_HOME:
            argv += ["--home", f"{bind.host}:{bind.inside}"]
        else:
            argv += ["--bind", f"{bind.host}:{bind.inside}" + ("" if bind.writable else ":ro")]
    argv += ["--pwd", workdir]
    if spec.network != "host":
        argv += ["--net", "--network", "none"]
    if settings.gpus:
        argv.append("--nv")
    if settings.cpus is not None:
        argv += ["--cpus", str(settings.cpus)]
    if settings.memory is not None:
        argv += ["--memory", settings.memory]
    return [*argv, "--env", f"HOME={CONTAINER_HOME}", str(settings.image), name]


def exec_argv(binary: str, name: str, argv: list[str], env: dict[str, str], workdir: str) -> list[str]:
    """`apptainer exec` of one command in the instance. `env K=V` rather than `--env`, which splits
    its value at commas."""
    pairs = [f"{k}={v}" for k, v in ({"HOME": str(CONTAINER_HOME)} | env).items()]
    return [binary, "exec", "--cleanenv", "--pwd", workdir, f"instance://{name}", "env", *pairs, *argv]


def stop_argv(binary: str, name: str) -> list[str]:
    return [binary, "instance", "stop", "--force", name]


class ApptainerRuntime(ContainerRuntime):
    name = "apptainer"
    Settings = EngineSettings
    pulls = True

    @classmethod
    def image_ref(cls, image: str) -> str:
        """apptainer pulls a docker image by its docker:// URI; a .sif file or a URI stays as it is."""
        return image if "://" in image or image.startswith("/") else f"docker://{image}"

    def __init__(
        self, spec: RuntimeSpec, settings: EngineSettings, root: str | Path, session_id: str, proxy_url: str | None
    ) -> None:
        binary = apptainer_binary()
        if binary is None:
            raise RuntimeError("runtime.kind apptainer: no `apptainer` on PATH (or set POLAR_APPTAINER_BIN)")
        super().__init__(spec, settings, root, session_id, proxy_url)
        self.binary, self.instance, self.overlay = binary, instance_name(session_id), self.folder / "overlay"
        self.started = False
        self.forwarder: asyncio.subprocess.Process | None = None
        self.groups = ProcessGroups()

    def _env(self) -> dict[str, str]:
        # apptainer itself needs ours (instance records, cache); --cleanenv keeps it out of the instance
        return dict(os.environ)

    async def start(self) -> None:
        try:
            await self._prepare()
            self.overlay.mkdir()
            extra = shlex.split(os.environ.get("POLAR_APPTAINER_ARGS", ""))
            argv = start_argv(
                self.binary,
                self.spec,
                self.settings,
                self.instance,
                self.binds(),
                self.overlay,
                str(self.inside_work),
                extra,
            )
            self.started = True  # from here on stop() must stop the instance, even if starting failed
            rc, out, err = await run_group(argv, self._env(), None, START_TIMEOUT_S)
            if rc != 0:
                raise RuntimeError(f"apptainer instance start failed ({rc}): {(err or out)[-2000:]}")
            if self.tunnel is not None:
                await self._start_forwarder()
            if "PATH" not in self.spec.env:  # the image's own (its %environment, a docker image's ENV)
                rc, out, _ = await self.exec(["sh", "-c", 'printf %s "$PATH"'], timeout=60)
                self.path = out.strip() if rc == 0 and out.strip() else self.path
            await self.cut_history()
        except BaseException:
            await self.stop()
            raise

    async def _start_forwarder(self) -> None:
        inner = self.forwarded(["sleep", "infinity"], ready=True)
        argv = exec_argv(self.binary, self.instance, inner, {}, str(self.inside_work))
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
                f"the proxy forwarder did not start in {self.settings.image!r} (the toolchain's Python, "
                f"scripts/setup.sh mini, or the image's python3): {err.decode(errors='replace')[-2000:]}"
            )

    async def exec(
        self, argv: list[str], env: dict[str, str] | None = None, timeout: float | None = None
    ) -> tuple[int, str, str]:
        full = exec_argv(self.binary, self.instance, argv, self.spec.env | (env or {}), str(self.inside_work))
        return await self.groups.run(full, self._env(), None, timeout)

    async def quiesce(self) -> list[str]:
        """Every process in the instance but its init killed: `kill -9 -1` from an exec (which spares that
        shell and the init), our forwarder among them (nothing needs the proxy once the agent has ended)."""
        left = [f"process group {pgid}" for pgid in self.groups.kill_all()]
        if self.started:
            rc, out, err = await self.exec(QUIESCE, timeout=60)
            if rc not in (0, 137):
                raise SandboxError(f"killing what the agent left in {self.instance} failed (rc {rc}): {err or out}")
        return left

    async def stop(self) -> None:
        try:
            self.groups.kill_all()
            if self.forwarder is not None:
                kill_group(self.forwarder.pid)
                await self.forwarder.wait()
                self.forwarder = None
            if self.started:
                self.started = False
                await run_group(stop_argv(self.binary, self.instance), self._env(), None, 60)
        finally:
            if self.tunnel is not None:
                await self.tunnel.stop()
            await asyncio.to_thread(remove_tree, self.folder)
