"""Sessions that span a weight update train correctly: each call is corrected against the policy version that
sampled it, by NeMo-RL's own importance-sampling correction (`loss_fn.use_importance_sampling_correction`, which its
async GRPO requires).

One group of four sessions, rewards [1, 0, 0, 1]. Each session is one prefix-merged trace with two trained calls:
call 1 sampled by policy version 0 (the tiny model), a tool result, then call 2 sampled by version 1 (the weights
after an update), each call's recorded logprobs those of the version that sampled it, as vLLM reports them. The
trainer holds version 2. The batch our worker builds from the Gym results (NeMo-RL's `postprocess` with the GRPO
recipe) and the loss `grpo_loss` computes on it must equal NeMo-RL's `ClippedPGLossFn` run directly on tensors
assembled here from the recorded per-version logprobs.
"""

from __future__ import annotations

import math

import pytest
import torch

from nemo_polar.learn.data import samples as to_samples
from nemo_polar.learn.policy import Policy
from nemo_polar.paths import ROOT, TINY_MODEL
from nemo_polar.traces.export import write_jsonl
from nemo_polar.traces.models import Segment, Trace

from ..conftest import nemo_rl_served, requires_nemo_rl

pytestmark = requires_nemo_rl

RECIPE = ROOT / "recipes" / "grpo_qwen3.5_4b_polar_swe.yaml"
OVERRIDES = ["loss_fn.use_importance_sampling_correction=true"]
REWARDS = [1.0, 0.0, 0.0, 1.0]
# the recipe's estimator (leave-one-out baseline, std normalisation) on [1, 0, 0, 1], worked by hand
ADVANTAGES = [2 / math.sqrt(3), -2 / math.sqrt(3), -2 / math.sqrt(3), 2 / math.sqrt(3)]
PROMPT = [100, 200, 300, 400]
CALL_1, TOOL, CALL_2 = slice(4, 7), slice(7, 9), slice(9, 12)  # positions in prompt + response


def _session_tokens(i: int) -> list[int]:
    return PROMPT + [500 + i, 600, 700] + [800 + i, 900] + [510 + i, 610, 710]


def _version(seed: int | None) -> Policy:
    """A policy version: the tiny model's weights, or a perturbation of them (the weights after an update)."""
    policy = Policy(TINY_MODEL, lr=1e-3)
    if seed is not None:
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in policy.model.parameters():
                p.add_(torch.randn(p.shape, generator=generator) * 0.02)
    return policy


@torch.no_grad()
def _logprobs(policy: Policy, tokens: list[list[int]]) -> torch.Tensor:
    """[B, S]: each token's logprob under `policy` (0 at the first), as vLLM reports a sampled token's."""
    return torch.nn.functional.pad(policy.next_token_logprobs(tokens), (1, 0))


@pytest.fixture(scope="module")
def versions() -> list[Policy]:
    return [_version(None), _version(1), _version(2)]


@pytest.fixture(scope="module")
def built(tmp_path_factory, versions):
    """The sessions' tasks through our worker: the GRPO batch NeMo-RL built, and what each version gives."""
    tmp = tmp_path_factory.mktemp("async_loss")
    tokens = [_session_tokens(i) for i in range(len(REWARDS))]
    recorded = [_logprobs(v, tokens) for v in versions]  # [version][B, S]
    sessions = []
    for i, reward in enumerate(REWARDS):
        behaviour = [0.0] * len(tokens[i])
        behaviour[CALL_1] = recorded[0][i, CALL_1].tolist()  # call 1: sampled by version 0
        behaviour[CALL_2] = recorded[1][i, CALL_2].tolist()  # call 2: sampled by version 1
        trace = Trace(
            prompt_ids=PROMPT,
            response_ids=tokens[i][len(PROMPT) :],
            loss_mask=[1, 1, 1, 0, 0, 1, 1, 1],
            response_logprobs=behaviour[len(PROMPT) :],
            record_ids=["r1", "r2"],
            segments=[
                Segment(record_id="r1", start=0, end=3, trained=True),
                Segment(record_id="r2", start=5, end=8, trained=True),
            ],
            metadata={"seq": [0, 1]},
        )
        path = tmp / f"s{i}.jsonl"
        write_jsonl([trace], path, session_id=f"s{i}")
        result = {"status": "completed", "reward": reward, "traces_path": str(path)}
        sessions.append({"session_id": f"s{i}", "state": "completed", "sample_index": i, "result": result})
    _, left_out, train = to_samples(
        [("fix it", {"task_id": "t0", "sessions": sessions})], TINY_MODEL, nemo_rl_served(), (RECIPE, OVERRIDES)
    )
    assert not left_out and train is not None
    return tokens, recorded, train


def _assembled(tokens: list[list[int]], recorded: list[torch.Tensor], width: int, behaviour: torch.Tensor | None):
    """The training tensors NeMo-RL's loss reads, assembled here: the sampled positions of both calls, the
    advantages worked by hand, the recorded logprobs of the version that sampled each call (`behaviour`, when
    given, replaces them)."""
    batch, length = len(tokens), len(tokens[0])
    mask = torch.zeros(batch, width)
    mask[:, CALL_1], mask[:, CALL_2] = 1.0, 1.0
    generation = torch.zeros(batch, width)
    generation[:, CALL_1], generation[:, CALL_2] = recorded[0][:, CALL_1], recorded[1][:, CALL_2]
    if behaviour is not None:
        generation[:, :length] = behaviour * mask[:, :length]
    advantages = torch.tensor(ADVANTAGES)[:, None] * mask
    zeros = torch.zeros(batch, width).tolist()
    return {
        "token_mask": mask.tolist(),
        "sample_mask": [1.0] * batch,
        "advantages": advantages.tolist(),
        "generation_logprobs": generation.tolist(),
        "prev_logprobs": zeros,  # the recipe forces the on-policy ratio: NeMo-RL reads the current logprobs instead
        "reference_policy_logprobs": zeros,
    }


@pytest.fixture(scope="module")
def loss_fn() -> dict:
    """The recipe's `loss_fn` section as NeMo-RL's loader resolves it, importance-sampling correction on."""
    judged = nemo_rl_served().call("validate", {"recipes": [{"path": str(RECIPE), "overrides": OVERRIDES}]})
    one = judged["recipes"][0]
    assert one["errors"] == [] and one["config"]["loss_fn"]["use_importance_sampling_correction"] is True
    return one["config"]["loss_fn"]


def test_the_batch_holds_each_calls_recorded_logprobs_not_the_trainers(built):
    tokens, recorded, train = built
    width = len(train["input_ids"][0])
    assert [row[: len(t)] for row, t in zip(train["input_ids"], tokens, strict=True)] == tokens
    generation = torch.tensor(train["generation_logprobs"])
    assert train["token_mask"] == [
        [int(CALL_1.start <= p < CALL_1.stop or CALL_2.start <= p < CALL_2.stop) for p in range(width)]
    ] * len(tokens)
    # float32, as NeMo-RL holds them: exactly the version that sampled each call
    assert torch.equal(generation[:, CALL_1], recorded[0][:, CALL_1].float())
    assert torch.equal(generation[:, CALL_2], recorded[1][:, CALL_2].float())
    # which differ from every other version's at those positions, so a mix-up would show
    for call, sampler in ((CALL_1, 0), (CALL_2, 1)):
        for other in {0, 1, 2} - {sampler}:
            assert torch.all(recorded[other][:, call] != recorded[sampler][:, call])


def test_the_loss_and_its_gradient_are_nemo_rls_on_the_recorded_logprobs(built, versions, loss_fn):
    tokens, recorded, train = built
    trainer = versions[2]
    served = nemo_rl_served()
    current = trainer.next_token_logprobs(train["input_ids"]).detach()
    ours = served.grpo_loss(train["id"], current.tolist())
    width = len(train["input_ids"][0])
    expected = served.call(
        "clipped_pg_loss",
        {"loss_fn": loss_fn, "data": _assembled(tokens, recorded, width, None), "logprobs": current.tolist()},
    )
    assert ours["loss"] == pytest.approx(expected["loss"], rel=1e-6, abs=1e-7)
    assert torch.allclose(torch.tensor(ours["grad"]), torch.tensor(expected["grad"]), rtol=1e-5, atol=1e-8)
    assert torch.tensor(expected["grad"]).abs().sum() > 0
    # the importance weights are not all 1: the same loss on the trainer's own logprobs as behaviour differs
    on_policy = served.call(
        "clipped_pg_loss",
        {"loss_fn": loss_fn, "data": _assembled(tokens, recorded, width, recorded[2]), "logprobs": current.tolist()},
    )
    assert abs(on_policy["loss"] - ours["loss"]) > 1e-4
    assert not torch.allclose(torch.tensor(on_policy["grad"]), torch.tensor(ours["grad"]), atol=1e-6)
    assert ours["metrics"]["sampling_importance_ratio"] != pytest.approx(1.0, abs=1e-3)
    assert on_policy["metrics"]["sampling_importance_ratio"] == pytest.approx(1.0, abs=1e-6)
