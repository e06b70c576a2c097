"""What crosses the pipe between the trainer (`nemo_polar.learn`) and NeMo-RL's process (`worker.py`), typed once
for both sides. Standard library only: the worker imports it beside itself, in NeMo-RL's Python."""

from __future__ import annotations

from typing import TypedDict


class TrainBatch(TypedDict, total=False):
    """NeMo-RL's GRPO training batch, as `grpo_train` builds it from post-processed groups (`_train_batch`), kept
    in the worker by `id` until its loss is asked (`grpo_loss`)."""

    id: int
    input_ids: list[list[int]]  # each row's tokens, padded
    token_mask: list[list[int]]  # 1 where the row's token is trained
    generation_logprobs: list[list[float]]  # each token's recorded logprob: the behaviour policy's
    sample_mask: list[float]  # each row's loss multiplier (0: masked)
    rewards: list[float]  # each rollout's
    rows: int  # a rollout's own, and a further chain's with every chain
    rollouts: int
    chains_refused: int  # further chains NeMo-RL's post-processing refused
    # added on the trainer's side, from the rollouts (`learn.data.built`)
    chains_built: int
    sampled_tokens: int
