"""`polar learn mode=async rollouts=nemo_rl`: NeMo-RL's own asynchronous collection (its `AsyncTrajectoryCollector` and
`ReplayBuffer`, driven as `async_grpo_train` drives them) runs the long-tailed agent through our Gym servers while the
policy trains and its weights are reloaded in vLLM. Every step trains a full batch with NeMo-RL's loss, each call
against the weights of the version that sampled it, and no group older than the age bound trains: not by NeMo-RL's
count (the weight version it started the group on), nor by the versions our proxy recorded on its calls."""

from __future__ import annotations

import pytest

from nemo_polar.config import load
from nemo_polar.learn import LearnConfig, learn

from ..conftest import requires_nemo_rl

pytestmark = [pytest.mark.vllm, requires_nemo_rl]
STEPS, PROMPTS, SAMPLES, MAX_AGE = 2, 2, 4, 1


def test_nemo_rls_async_collector_feeds_every_step_within_the_age_bound(tmp_path):
    overrides = [
        f"run_dir={tmp_path}",
        "mode=async",
        "rollouts=nemo_rl",
        f"steps={STEPS}",
        f"prompts={PROMPTS}",
        f"samples={SAMPLES}",
        f"max_age={MAX_AGE}",
        "solved_after=null",
        "harness.command=python3 long_tail_agent.py --tail 4 --tool-s 0.3",
    ]
    run = learn(load(LearnConfig, "learn", overrides))
    assert (run["rollouts"], run["mode"], run["post_processing"], run["loss"]) == (
        "nemo_rl",
        "async",
        "nemo_rl",
        "nemo_rl",
    )
    assert run["steps"] == STEPS and run["max_logprob_err"] <= 1e-4
    for h in run["history"]:
        assert h["rows"] == PROMPTS * SAMPLES and h["samples"] + h["left_out"] == PROMPTS * SAMPLES, h
        assert sum(h["ages"].values()) == PROMPTS and max(int(a) for a in h["ages"]) <= MAX_AGE, h["ages"]
        assert all(h["step"] - MAX_AGE <= int(v) <= h["step"] for v in h["policy_versions"]), h["policy_versions"]
    assert run["sessions_by_node"] == {"node-0": STEPS * PROMPTS * SAMPLES}
