"""`polar learn`: the one-machine loop that shows the rollouts train (GRPO on the tiny model, in torch)."""

from typing import Any

from .config import LearnConfig

__all__ = ["LearnConfig", "learn"]


def __getattr__(name: str) -> Any:  # the loop imports torch: only where it runs, not where its settings are read
    if name == "learn":
        from .loop import learn

        return learn
    raise AttributeError(name)
