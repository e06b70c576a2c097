"""The GRPO update on the tiny model, apart from the loop: it trains whatever grad mode its caller's
thread is in (an earlier caller that switched grad off once made every step fail)."""

from __future__ import annotations

import pytest
import torch

from nemo_polar.learn.policy import Policy, Sample
from nemo_polar.paths import TINY_MODEL


def test_an_update_trains_even_when_the_caller_switched_grad_off(tmp_path):
    policy = Policy(TINY_MODEL, lr=1e-3)
    prompt, answer = [5, 6, 7], [8, 9]
    samples = [
        Sample(prompt + answer, [0, 0, 0, 1, 1], [0.0, 0.0, 0.0, -1.0, -1.0], reward=r, group=0) for r in (1.0, 0.0)
    ]
    before = [p.detach().clone() for p in policy.model.parameters()]
    was = torch.is_grad_enabled()
    torch.set_grad_enabled(False)
    try:
        row = policy.update(samples)
    finally:
        torch.set_grad_enabled(was)
    assert row["updated"] == 1.0
    assert any(not torch.equal(a, b.detach()) for a, b in zip(before, policy.model.parameters(), strict=True))


def test_an_explicit_nemo_rl_update_without_nemo_rl_refuses_instead_of_training_with_ours(monkeypatch):
    from pydantic import ValidationError
    from rich.console import Console

    from nemo_polar.learn.loop import LearnConfig, _nemo_rl
    from nemo_polar.nemo_rl import NemoRLNotFound

    console = Console(quiet=True)
    with pytest.raises(ValidationError, match="needs nemo_rl=true"):
        LearnConfig(update="nemo_rl", nemo_rl=False)
    monkeypatch.delenv("NEMO_RL_DIR", raising=False)
    with pytest.raises(NemoRLNotFound):
        _nemo_rl(LearnConfig(update="nemo_rl"), console).__enter__()
    parts = _nemo_rl(LearnConfig(), console).__enter__()  # auto: ours, said so
    assert parts.commands is None and parts.recipe is None
