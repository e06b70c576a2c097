"""`polar learn mode=async` through the whole system, on the long-tailed agent with faults: sessions stay in flight
while the policy trains and its weights are reloaded in vLLM, so sessions span updates. Every call must still train
against the weights that sampled it (its recorded logprobs match a recompute by that version's weights), no group
older than the age bound trains, and every session that does not train says why: a crashed harness, one past its
agent timeout, a stale group."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from nemo_polar.config import load
from nemo_polar.learn import LearnConfig, learn

pytestmark = pytest.mark.vllm
STEPS, PROMPTS, SAMPLES, MAX_AGE = 4, 3, 4, 2


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    # 1 s of tool between calls: a session of several calls outlives a step, and spans an update
    agent = "python3 long_tail_agent.py --tail 6 --tool-s 1 --crash 0.15 --hang 0.1"
    overrides = [
        f"run_dir={tmp_path_factory.mktemp('learn-async')}",
        "mode=async",
        f"steps={STEPS}",
        f"prompts={PROMPTS}",
        f"samples={SAMPLES}",
        f"max_age={MAX_AGE}",
        "solved_after=null",
        "agent_timeout_s=12",
        f"harness.command={agent}",
        f"capacity.run={PROMPTS * SAMPLES * (MAX_AGE + 1)}",
        f"capacity.ready={PROMPTS * SAMPLES * (MAX_AGE + 1)}",
    ]
    return learn(load(LearnConfig, "learn", overrides))


def test_sessions_span_updates_and_each_call_trains_against_the_weights_that_sampled_it(run):
    history = run["history"]
    assert run["max_logprob_err"] <= 1e-4
    assert sum(h["spanning"] for h in history) > 0, [h["policy_versions"] for h in history]
    # a step trains calls of several policy versions: its own and older ones
    assert any(len(h["policy_versions"]) > 1 for h in history), [h["policy_versions"] for h in history]
    assert all(int(v) <= h["step"] for h in history for v in h["policy_versions"])


def test_no_group_older_than_the_age_bound_trains(run):
    ages = [int(age) for h in run["history"] for age in h["ages"]]
    assert ages and max(ages) <= MAX_AGE
    assert all(sum(h["ages"].values()) == PROMPTS for h in run["history"])  # a full batch every step


def test_every_session_trains_or_is_left_out_with_its_reason(run):
    reasons = {}
    for h in run["history"]:
        stale = sum(n for why, n in h["left_out_because"].items() if why.startswith("stale"))
        assert h["samples"] + h["left_out"] - stale == PROMPTS * SAMPLES
        for why, n in h["left_out_because"].items():
            reasons[why] = reasons.get(why, 0) + n
    assert "masked" not in reasons and "" not in reasons, reasons
    assert any(why.startswith("timeout:agent") for why in reasons), reasons  # the hangs, named
    # a crashed harness is the agent's own failure: its session completes and its reward is 0 (no answer), trained;
    # the sessions still in flight when the run ended are the only ones without a final state
    with closing(sqlite3.connect(Path(run["run_dir"]) / "rollout.sqlite")) as db:
        states = dict(db.execute("SELECT state, count(*) FROM sessions GROUP BY state").fetchall())
        final = "('completed', 'timeout', 'error', 'cancelled')"
        lost = db.execute(f"SELECT count(*) FROM sessions WHERE state IN {final} AND result IS NULL").fetchone()
    assert states.get("completed", 0) >= run["history"][-1]["step"] * PROMPTS * SAMPLES and lost == (0,), states
    assert run["busy"] is not None and 0 < run["busy"] <= 1
