"""Teacher forcing on CPU with the tiny model's weights: what the logprobs of given tokens are."""

from __future__ import annotations

from functools import cache

from nemo_polar.paths import TINY_MODEL


@cache
def tiny_model():
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(TINY_MODEL, dtype=torch.float32).eval()


def logprobs_of(context: list[int], tokens: list[int]) -> list[float]:
    """log p(tokens[k] | context + tokens[:k]) for every k, in one forward pass."""
    import torch

    ids = torch.tensor([context + tokens])
    with torch.no_grad():  # a context, never the process-wide switch: later tests train
        logprobs = torch.log_softmax(tiny_model()(ids).logits[0].float(), dim=-1)
    positions = torch.arange(len(context) - 1, len(context) + len(tokens) - 1)
    return logprobs[positions, torch.tensor(tokens)].tolist()
