"""NeMo-RL's own GRPO update on a batch of ours: the training batch its `grpo_train` builds from our Gym
results, its advantage estimator and `ClippedPGLossFn` as our recipe configures them (in NeMo-RL's process,
`nemo_polar/nemo_rl/worker.py`), and the gradient it sends back through the tiny model.

Three groups of four sessions, rewards [1,0,0,0], [1,0,0,1], [1,1,1,1]; the recorded logprobs are the tiny
model's own (as vLLM serves it), so importance weights are 1 and the recipe's settings alone shape the loss.
"""

from __future__ import annotations

import math

import pytest
import torch

from nemo_polar.learn.data import gym_results, training_samples
from nemo_polar.learn.data import samples as to_samples
from nemo_polar.learn.policy import Policy, Sample
from nemo_polar.paths import ROOT, TINY_MODEL
from nemo_polar.traces.export import write_jsonl
from nemo_polar.traces.models import Segment, Trace

from ..conftest import nemo_rl_served, requires_nemo_rl

pytestmark = requires_nemo_rl

RECIPE = ROOT / "recipes" / "grpo_qwen3.5_4b_polar_swe.yaml"
REWARDS = ([1.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0])
# The recipe's estimator (grpo, leave-one-out baseline, std normalisation), worked by hand: with [1,0,0,0]
# the 1's baseline is 0 with std 0 (left unnormalised), each 0's is 1/3 with std sqrt(1/3).
EXPECTED = (
    [1.0, -1 / math.sqrt(3), -1 / math.sqrt(3), -1 / math.sqrt(3)],
    [2 / math.sqrt(3)] + [-2 / math.sqrt(3)] * 2 + [2 / math.sqrt(3)],
    [0.0] * 4,
)


def _tasks(tmp_path, policy: Policy) -> list[tuple[str, dict]]:
    """Finished tasks as the rollout server reports them, one trained call per session."""
    tasks = []
    for g, rewards in enumerate(REWARDS):
        prompt = [100 + g, 200, 300 + g, 400]
        sessions = []
        for i, reward in enumerate(rewards):
            answer = [500 + 10 * g + i, 600 + i, 700 + g]
            mine, _ = policy._token_logprobs(Sample(prompt + answer, [0] * 4 + [1] * 3, [0.0] * 7, reward, g))
            trace = Trace(
                prompt_ids=prompt,
                response_ids=answer,
                loss_mask=[1, 1, 1],
                response_logprobs=[float(x) for x in mine.detach()],
                record_ids=["r1"],
                segments=[Segment(record_id="r1", start=0, end=3, trained=True)],
                metadata={"seq": [0]},
            )
            path = tmp_path / f"g{g}s{i}.jsonl"
            write_jsonl([trace], path, session_id=f"g{g}s{i}")
            result = {"status": "completed", "reward": reward, "traces_path": str(path)}
            sessions.append({"session_id": f"g{g}s{i}", "state": "completed", "sample_index": i, "result": result})
        tasks.append((f"prompt {g}", {"task_id": f"t{g}", "sessions": sessions}))
    return tasks


@pytest.fixture(scope="module")
def policy() -> Policy:
    return Policy(TINY_MODEL, lr=1e-3)


@pytest.fixture(scope="module")
def batch(tmp_path_factory, policy):
    tasks = _tasks(tmp_path_factory.mktemp("nemo_rl_loss"), policy)
    samples, left_out, train = to_samples(tasks, TINY_MODEL, nemo_rl_served(), (RECIPE, []))
    assert not left_out and train is not None
    return samples, train


def _loss(train: dict, overrides: list[str] | None = None, prev_shift: float | None = None):
    """NeMo-RL's loss on `train` (re-built under `overrides` when given), its prev logprobs shifted from the
    current ones by `prev_shift`."""
    served = nemo_rl_served()

    def loss(logprobs: list[list[float]]) -> dict:
        prev = None if prev_shift is None else [[x + prev_shift for x in row] for row in logprobs]
        return served.grpo_loss(train["id"], logprobs, prev)

    return loss


def test_the_advantages_are_the_recipes_leave_one_out_estimator(batch, policy):
    _, train = batch
    answer = policy.backward_by(train["input_ids"], _loss(train))
    policy.optimizer.zero_grad()
    adv = torch.tensor(answer["advantages"])
    mask = torch.tensor(train["token_mask"]).bool()
    assert [sum(row) for row in train["token_mask"]] == [3] * 12  # the answer tokens, nothing of the prompt
    per_sample = [float(adv[i][mask[i]][0]) for i in range(12)]
    assert per_sample == pytest.approx([a for group in EXPECTED for a in group], abs=1e-5)
    for i in range(12):  # one advantage per sample on its tokens, nothing off them
        assert torch.all(adv[i][mask[i]] == adv[i][mask[i]][0]) and torch.all(adv[i][~mask[i]] == 0)
    assert train["rewards"] == [r for group in REWARDS for r in group]


def test_nemo_rls_gradient_points_where_ours_does(batch, policy):
    samples, train = batch
    answer = policy.backward_by(train["input_ids"], _loss(train))
    theirs = torch.cat([p.grad.flatten() for p in policy.model.parameters()])
    policy.optimizer.zero_grad()
    policy.backward(samples)
    ours = torch.cat([p.grad.flatten() for p in policy.model.parameters()])
    policy.optimizer.zero_grad()
    # d loss / d logprob: down (raise the logprob) where the advantage is positive, up where negative
    grad, adv = torch.tensor(answer["grad"]), torch.tensor(answer["advantages"])[:, 1:]
    assert torch.equal(torch.sign(grad), -torch.sign(adv))
    assert answer["metrics"]["token_mult_prob_error"] == pytest.approx(1.0, abs=1e-4)  # forced on-policy: 1
    cosine = float(torch.nn.functional.cosine_similarity(theirs, ours, dim=0))
    assert cosine > 0.9, cosine  # the same direction; the estimators differ (leave-one-out vs group mean)


def test_the_recipes_clip_holds_positive_advantages_at_1_28(tmp_path, policy, batch):
    """With the ratio on (force_on_policy_ratio off), prev logprobs 0.25 below the current ones make every
    ratio e^0.25 = 1.284: past the recipe's upper clip 0.28, so positive advantages get no gradient and
    negative ones do; at e^0.22 = 1.246 (inside 1.28, outside the symmetric 0.2) both do."""
    samples, _ = batch
    tasks = _tasks(tmp_path, policy)
    _, _, train = to_samples(tasks, TINY_MODEL, nemo_rl_served(), (RECIPE, ["loss_fn.force_on_policy_ratio=false"]))
    assert train is not None
    for shift, positive_moves in ((-0.25, False), (-0.22, True)):
        answer = policy.backward_by(train["input_ids"], _loss(train, prev_shift=shift))
        policy.optimizer.zero_grad()
        grad, adv = torch.tensor(answer["grad"]), torch.tensor(answer["advantages"])[:, 1:]
        assert torch.all(grad[adv < 0] > 0)
        assert (
            bool(torch.all(grad[adv > 0] < 0)) is positive_moves
            and bool(torch.all(grad[adv > 0] == 0)) is not positive_moves
        )
        assert answer["metrics"]["probs_ratio_clamped_max"] == pytest.approx(min(math.exp(-shift), 1.28), abs=1e-4)


def test_a_rollout_nemo_rl_refuses_leaves_its_group_out_saying_why(tmp_path, policy):
    """NeMo-RL post-processes a group once all its rows converted: one rollout it refuses (a second call whose
    prompt does not extend the first's, a history rewritten) leaves its whole group out of the step, each of the
    others saying why, and the other groups train."""
    rows, results = gym_results(_tasks(tmp_path, policy))
    output = results[1]["response"]["output"]
    first = output[0]
    output.append(first | {"id": "msg_r2", "prompt_token_ids": [999, *first["prompt_token_ids"]]})
    judged = nemo_rl_served().postprocess(rows, results, 4, TINY_MODEL)
    samples, left_out = training_samples(judged, 4)
    assert [s.group for s in samples] == [1] * 4 + [2] * 4
    assert "Non-contiguous messages found" in left_out[1]
    assert left_out[:1] + left_out[2:] == ["its group was not post-processed: rollout 1 was refused"] * 3
