"""Every chain trained under NeMo-RL's own loss: a session's chains as rows of their own, each taking its rollout's
advantage, the loss over the unique sampled tokens. Split into chains that extend each other, a session gives the
loss and the gradient its single row gives, token by token; trained on its first chain alone, it does not."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from nemo_polar.learn.data import AGENT, further_chains
from nemo_polar.learn.policy import Policy
from nemo_polar.paths import TINY_MODEL
from nemo_polar.traces.export import gym_output_items, training_traces
from nemo_polar.traces.models import Segment, Trace

from ..conftest import nemo_rl_served, requires_nemo_rl

pytestmark = requires_nemo_rl
RECIPE = Path(__file__).resolve().parents[2] / "recipes/grpo_qwen3.5_4b_polar_swe.yaml"
REWARDS = (1.0, 0.0, 0.0, 1.0)  # one task's group: leave-one-out advantages of both signs


PROMPT = [1375, 623, 1619, 834, 1728, 1514]  # the task's: NeMo-RL groups its samples by it


def _session(rng: random.Random, policy: Policy, prompt: list[int] = PROMPT) -> tuple[Trace, list[Trace]]:
    """One session as one chain (prompt, first answer, tool output, second answer), and the same tokens as two
    chains that extend each other: the first answer's, then the whole, its first answer owned by the first.
    Logprobs are the policy's own, so the recorded and the recomputed agree."""
    lengths = (rng.randrange(2, 7), 3, rng.randrange(2, 9))  # answers of their own lengths: a loss that is not 0
    first, tool, second = ([rng.randrange(100, 2000) for _ in range(n)] for n in lengths)
    tokens = prompt + first + tool + second
    logprobs = [0.0] + policy.next_token_logprobs([tokens])[0].tolist()
    n, a, b = len(prompt), len(first), len(tool) + len(second)

    def chain(end: int, owned: tuple[bool, bool]) -> Trace:
        spans = [Segment(record_id="c1", start=0, end=a, trained=owned[0])]
        spans += [Segment(record_id="c2", start=a + len(tool), end=a + b, trained=owned[1])][: end > a]
        mask = [0] * (end)
        for s in spans:
            mask[s.start : s.end] = [int(s.trained)] * (s.end - s.start)
        return Trace(
            prompt_ids=prompt,
            response_ids=tokens[n : n + end],
            loss_mask=mask,
            response_logprobs=[lp if m else 0.0 for lp, m in zip(logprobs[n : n + end], mask, strict=True)],
            record_ids=[s.record_id for s in spans],
            segments=spans,
        )

    return chain(a + b, (True, True)), [chain(a, (True, False)), chain(a + b, (False, True))]


def _result(chains: list[Trace], reward: float, session: str) -> dict:
    return {
        "responses_create_params": {"input": []},
        "response": {"output": gym_output_items(chains[0])},
        "reward": reward,
        "polar": {"primary_chain": 0},
        "training_traces": training_traces(chains, session),
    }


def _loss(policy: Policy, results: list[dict], chains: bool, overrides: tuple[str, ...] = ()) -> tuple[dict, list]:
    """NeMo-RL's batch, advantages and ClippedPGLossFn on the results, and the policy's gradient from it."""
    rows = [{"responses_create_params": {"input": []}, "agent_ref": AGENT}] * len(results)
    more = {"chains": further_chains(results)} if chains else {}
    _, train = nemo_rl_served().grpo_batch(rows, results, len(results), TINY_MODEL, RECIPE, list(overrides), **more)
    policy.model.zero_grad()
    answer = policy.backward_by(train["input_ids"], lambda lp: nemo_rl_served().grpo_loss(train["id"], lp))
    return answer | {"rows": train["rows"]}, [p.grad.clone() for p in policy.model.parameters() if p.grad is not None]


@pytest.fixture(scope="module")
def sessions():
    policy = Policy(TINY_MODEL, lr=1e-3)
    rng = random.Random(5)
    return policy, [_session(rng, policy) for _ in REWARDS]


def test_chains_that_extend_each_other_train_as_their_single_row(sessions):
    policy, made = sessions
    merged = [_result([whole], r, f"s{i}") for i, ((whole, _), r) in enumerate(zip(made, REWARDS, strict=True))]
    split = [_result(parts, r, f"s{i}") for i, ((_, parts), r) in enumerate(zip(made, REWARDS, strict=True))]
    one, one_grads = _loss(policy, merged, chains=True)
    every, every_grads = _loss(policy, split, chains=True)
    assert (one["rows"], every["rows"]) == (4, 8)  # a row per chain
    assert every["loss"] == pytest.approx(one["loss"], rel=1e-5, abs=1e-7) and one["loss"] != 0.0
    for a, b in zip(one_grads, every_grads, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)  # float32 sums over rows of other lengths
    # each further chain's row takes its rollout's advantage: the same value on each of its trained tokens
    for logical, extra in zip(one["advantages"][:4], every["advantages"][4:], strict=True):
        assert {round(x, 6) for x in extra if x} == {round(x, 6) for x in logical if x}

    primary, primary_grads = _loss(policy, split, chains=False)  # the first chain alone: the second answer untrained
    assert primary["rows"] == 4
    assert any(not torch.allclose(a, b, atol=1e-6) for a, b in zip(one_grads, primary_grads, strict=True))


def test_every_chain_takes_a_token_level_loss_only(sessions):
    policy, made = sessions
    split = [_result(parts, r, f"s{i}") for i, ((_, parts), r) in enumerate(zip(made, REWARDS, strict=True))]
    with pytest.raises(Exception, match="token-level loss only"):
        _loss(policy, split, chains=True, overrides=("loss_fn.token_level_loss=false",))
