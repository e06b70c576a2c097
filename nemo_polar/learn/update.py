"""Who updates the policy on a step's `Batch`: our GRPO loss, or NeMo-RL's on the training batch it built.

Both train each sampled token against the logprobs it was sampled with (the recorded ones), so a group sampled
by older weights (`mode=async`) is trained off-policy with an importance weight: ours through the PPO ratio
against those logprobs, NeMo-RL's by its `use_importance_sampling_correction` (`ClippedPGLossFn`), which the
loop turns on for async runs as NeMo-RL's async GRPO requires.
"""

from __future__ import annotations

import functools
from typing import Protocol

from .collect import Batch
from .policy import Policy


class Updater(Protocol):
    def update(self, policy: Policy, batch: Batch) -> dict[str, float]: ...


class OurLoss:
    def update(self, policy: Policy, batch: Batch) -> dict[str, float]:
        return policy.update(batch.samples)


class NemoRLLoss:
    """NeMo-RL's advantages and loss, computed in its process (`commands`: the worker that built the batch)."""

    def __init__(self, commands):
        self.commands = commands

    def update(self, policy: Policy, batch: Batch) -> dict[str, float]:
        if batch.train is None:  # no group survived post-processing
            return {"updated": 0.0, "loss": 0.0}
        loss = functools.partial(self.commands.grpo_loss, batch.train["id"])
        return policy.update_by(batch.train["input_ids"], loss)
