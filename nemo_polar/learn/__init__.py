"""`polar learn`: the one-machine loop that shows the rollouts train (GRPO on the tiny model, in torch)."""

from .loop import LearnConfig, learn

__all__ = ["LearnConfig", "learn"]
