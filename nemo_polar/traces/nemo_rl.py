"""What NeMo-RL does with a NeMo Gym `/run` result, re-implemented on plain lists (no torch, no GPU).

NeMo-RL (`nemo_rl/environments/nemo_gym.py::_postprocess_nemo_gym_to_nemo_rl_result`, then
`grpo.py` and `nemo_rl/data/llm_message_utils.py`) turns one rollout into one flat training row:

1. Walk `response.output`. An item is *trainable* iff it has a non-empty `generation_token_ids`
   (Gym puts the three token fields on the last output item of each model call); every other item
   (tool outputs, user turns, the earlier items of a call) is ignored: its tokens re-appear inside
   the next call's `prompt_token_ids`.
2. Keep `seen`, every token emitted so far. Each trainable item's `prompt_token_ids` must start with
   `seen` (the prefix invariant); NeMo-RL asserts "Non-contiguous messages found!" otherwise.
3. Emit a `user` message with the new prompt tokens, then an `assistant` message with the sampled
   tokens and their `generation_logprobs`; extend `seen` by both. Tokens after the last model call
   are not part of the row.
4. GRPO gives every message a `token_loss_mask` (1 on assistant tokens) and zero logprobs on user
   tokens, then concatenates the messages and right-pads the batch
   (`batched_message_log_to_flat_message`).

We run the same steps on what we export (`nemo_polar.traces.export`) so a trace that would crash a
training run fails here, on a CPU, first. The checks NeMo-RL does are kept (with the same error
types: AssertionError, ValueError, RuntimeError); messages say where the problem is. Two checks are
stricter than NeMo-RL, which would fail later or not at all: token ids vs logprobs lengths, and a
trainable item without `prompt_token_ids`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

REL_TOL = 1e-5  # reward_components vs reward, as NeMo-RL checks them
ABS_TOL = 1e-6


class ContiguityError(AssertionError):
    """A trainable item's prompt does not extend the tokens seen so far (NeMo-RL's assert)."""


@dataclass
class FlatRollout:
    """One rollout as the trainer sees it: the concatenated sequence and its per-token fields."""

    token_ids: list[int]
    token_mask: list[int]  # 1 on sampled (assistant) tokens
    generation_logprobs: list[float]  # 0.0 on prompt (user) tokens
    turns: int  # trainable items, i.e. model calls (NeMo-RL's `turns_per_sample`)
    reward: float | None = None
    loss_multiplier: float = 1.0

    @property
    def length(self) -> int:
        return len(self.token_ids)


# --- result -> message_log ----------------------------------------------------------------------
def is_trainable(item: dict[str, Any]) -> bool:
    return bool(item.get("generation_token_ids"))


def message_log(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The user/assistant `message_log` of one rollout's output items; raises as NeMo-RL would."""
    log: list[dict[str, Any]] = []
    seen: list[int] = []
    for index, item in enumerate(output):
        if not is_trainable(item):
            continue
        prompt, generated, logprobs = _token_fields(index, item)
        _check_prefix(index, seen, prompt)
        new_prompt = prompt[len(seen) :]
        log.append({"role": "user", "content": "", "token_ids": new_prompt})
        log.append({"role": "assistant", "content": "", "token_ids": generated, "generation_logprobs": logprobs})
        seen += new_prompt + generated
    if not log:
        types = [item.get("type") for item in output]
        raise ValueError(f"NeMo Gym returned a result with no generation data (output item types: {types})")
    return log


def _token_fields(index: int, item: dict[str, Any]) -> tuple[list[int], list[int], list[float]]:
    if "prompt_token_ids" not in item:
        raise ValueError(f"output item {index} has generation_token_ids but no prompt_token_ids")
    prompt = [int(t) for t in item["prompt_token_ids"]]
    generated = [int(t) for t in item["generation_token_ids"]]
    logprobs = [float(x) for x in item.get("generation_log_probs") or []]
    if len(logprobs) != len(generated):
        raise ValueError(
            f"output item {index}: {len(generated)} generation_token_ids but {len(logprobs)} generation_log_probs"
        )
    nan = next((i for i, x in enumerate(logprobs) if math.isnan(x)), None)
    if nan is not None:
        raise RuntimeError(f"output item {index}: NaN in generation_log_probs at generation position {nan}")
    return prompt, generated, logprobs


def _check_prefix(index: int, seen: list[int], prompt: list[int]) -> None:
    if prompt[: len(seen)] == seen:
        return
    position = next((i for i, (a, b) in enumerate(zip(seen, prompt, strict=False)) if a != b), len(prompt))
    if position < len(prompt):
        detail = f"seen token {seen[position]} but the prompt has {prompt[position]}"
    else:
        detail = f"the prompt has {len(prompt)} tokens, fewer than the {len(seen)} seen"
    raise ContiguityError(
        f"Non-contiguous messages found! Output item {index}: its prompt_token_ids diverge from the tokens "
        f"seen so far at token position {position} ({detail}). The history was rewritten, truncated, "
        "re-tokenized or had reasoning stripped."
    )


# --- the /run result as a whole -------------------------------------------------------------------
def check_reward(result: dict[str, Any]) -> float:
    """`reward` as a float; `reward_components`, when given, must sum to it."""
    if "reward" not in result:
        raise ValueError("NeMo Gym result has no 'reward'")
    reward = float(result["reward"])
    components = result.get("reward_components")
    if components:
        total = sum(float(v) for v in components.values())
        if not math.isclose(total, reward, rel_tol=REL_TOL, abs_tol=ABS_TOL):
            raise ValueError(f"reward_components sum to {total}, not to reward {reward}: {components}")
    return reward


def loss_multiplier(result: dict[str, Any], *, should_mask_flagged_samples: bool = True) -> float:
    flagged = bool((result.get("instance_config") or {}).get("mask_sample"))
    return 0.0 if flagged and should_mask_flagged_samples else 1.0


def postprocess_result(result: dict[str, Any]) -> dict[str, Any]:
    """A `/run` result as NeMo-RL's rollout code keeps it (message_log, reward, loss multiplier)."""
    reward = check_reward(result)
    log = message_log(result["response"]["output"])
    return {
        "message_log": log,
        "input_message_log": log[:1],
        "total_reward": reward,
        "loss_multiplier": loss_multiplier(result),
    }


# --- message_log -> flat rows ---------------------------------------------------------------------
def add_loss_fields(log: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """GRPO's per-message fields: a loss mask on assistant tokens, zero logprobs elsewhere."""
    out = []
    for message in log:
        n = len(message["token_ids"])
        assistant = message["role"] == "assistant"
        filled = dict(message, token_loss_mask=[1 if assistant else 0] * n)
        filled.setdefault("generation_logprobs", [0.0] * n)
        out.append(filled)
    return out


def message_log_to_flat_messages(log: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Concatenate each key over the messages (strings are collected one per message)."""
    flat: dict[str, list[Any]] = {}
    for message in log:
        for key, value in message.items():
            if isinstance(value, list):
                flat.setdefault(key, []).extend(value)
            else:
                flat.setdefault(key, []).append(value)
    return flat


def batched_message_log_to_flat_message(
    batch: list[list[dict[str, Any]]],
    pad_value_dict: dict[str, Any] | None = None,
    make_sequence_length_divisible_by: int = 1,
) -> tuple[dict[str, list[Any]], list[int]]:
    """Flatten each message_log and right-pad the list-valued keys to one length.

    Returns (key -> one row per sample, input_lengths). `input_lengths` counts the real tokens of
    each row; padding uses `pad_value_dict[key]`, else 0.

    >>> rows, lengths = batched_message_log_to_flat_message(
    ...     [[{"token_ids": [1, 2, 3, 4, 5]}, {"token_ids": [6, 7]}],
    ...      [{"token_ids": [1, 8, 9, 10, 11, 12]}, {"token_ids": [13, 14, 15]}]])
    >>> rows["token_ids"], lengths
    ([[1, 2, 3, 4, 5, 6, 7, 0, 0], [1, 8, 9, 10, 11, 12, 13, 14, 15]], [7, 9])
    """
    flats = [message_log_to_flat_messages(log) for log in batch]
    lengths = [len(f.get("token_ids", [])) for f in flats]
    width = _round_up(max(lengths, default=0), make_sequence_length_divisible_by)
    pads = pad_value_dict or {}
    rows: dict[str, list[Any]] = {}
    for key in dict.fromkeys(k for f in flats for k in f):
        values = [f.get(key, []) for f in flats]
        if any(isinstance(v, str) for row in values for v in row):
            rows[key] = values  # role/content strings: kept per message, never padded
        else:
            rows[key] = [row + [pads.get(key, 0)] * (width - len(row)) for row in values]
    return rows, lengths


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple if multiple > 1 else n


# --- the whole check --------------------------------------------------------------------------
def flatten(obj: dict[str, Any] | list[dict[str, Any]]) -> FlatRollout:
    """Run NeMo-RL's checks and flattening on a `/run` result, a Responses object or its output list.

    Only a full `/run` result (one with `response`) has its reward checked.
    """
    reward, multiplier = None, 1.0
    if isinstance(obj, dict) and "response" in obj:
        reward, multiplier = check_reward(obj), loss_multiplier(obj)
        obj = obj["response"]
    output = obj["output"] if isinstance(obj, dict) else obj
    log = add_loss_fields(message_log(output))
    flat = message_log_to_flat_messages(log)
    return FlatRollout(
        token_ids=flat["token_ids"],
        token_mask=flat["token_loss_mask"],
        generation_logprobs=flat["generation_logprobs"],
        turns=len(log) // 2,
        reward=reward,
        loss_multiplier=multiplier,
    )
