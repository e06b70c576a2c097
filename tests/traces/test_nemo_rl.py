"""The CPU re-implementation of NeMo-RL's Gym-result flattening, on NeMo-RL's own vectors and its failures."""

from __future__ import annotations

import doctest
import math

import pytest

from nemo_polar.traces import nemo_rl
from nemo_polar.traces.nemo_rl import (
    ContiguityError,
    batched_message_log_to_flat_message,
    flatten,
    message_log,
    postprocess_result,
)


def _item(prompt, gen, lp):
    return {"type": "message", "prompt_token_ids": prompt, "generation_token_ids": gen, "generation_log_probs": lp}


# NeMo-RL tests/unit/environments/test_nemo_gym.py: two calls, the second prompt extends the first.
GOLDEN = [_item([1, 2], [3], [-0.1]), _item([1, 2, 3, 4, 5], [6, 7], [-0.2, -0.3])]


def test_golden_vector_message_log():
    log = message_log(GOLDEN)
    assert [m["token_ids"] for m in log] == [[1, 2], [3], [4, 5], [6, 7]]
    assert [m["role"] for m in log] == ["user", "assistant", "user", "assistant"]
    assert [m.get("generation_logprobs") for m in log] == [None, [-0.1], None, [-0.2, -0.3]]


def test_golden_vector_flat():
    flat = flatten(GOLDEN)
    assert flat.token_ids == [1, 2, 3, 4, 5, 6, 7]
    assert flat.token_mask == [0, 0, 1, 0, 0, 1, 1]
    assert flat.generation_logprobs == [0.0, 0.0, -0.1, 0.0, 0.0, -0.2, -0.3]
    assert flat.turns == 2 and flat.length == 7 and flat.reward is None


def test_untrainable_items_are_skipped():
    tool_output = {"type": "function_call_output", "call_id": "c", "output": "ok"}
    empty = _item([9, 9, 9], [], [])  # an all-EOS generation stripped to []: skipped, not checked
    no_tokens = {"type": "message", "role": "assistant", "content": []}
    flat = flatten([no_tokens, GOLDEN[0], tool_output, empty, GOLDEN[1], tool_output])
    assert flat.token_ids == [1, 2, 3, 4, 5, 6, 7] and flat.turns == 2


def test_tokens_after_the_last_call_are_not_in_the_row():
    flat = flatten([GOLDEN[0], {"type": "function_call_output", "output": "x", "prompt_token_ids": [1, 2, 3, 8]}])
    assert flat.token_ids == [1, 2, 3]


def test_accepts_result_response_or_output_list():
    response = {"object": "response", "output": GOLDEN}
    result = {"response": response, "reward": 0.5}
    assert flatten(response).token_ids == flatten(result).token_ids == flatten(GOLDEN).token_ids
    assert flatten(result).reward == 0.5


def test_padding_doctest_vectors():
    batch = [
        [{"token_ids": [1, 2, 3, 4, 5]}, {"token_ids": [6, 7]}],
        [{"token_ids": [1, 8, 9, 10, 11, 12]}, {"token_ids": [13, 14, 15]}],
    ]
    rows, lengths = batched_message_log_to_flat_message(batch)
    assert rows["token_ids"] == [[1, 2, 3, 4, 5, 6, 7, 0, 0], [1, 8, 9, 10, 11, 12, 13, 14, 15]]
    assert lengths == [7, 9]
    rows, _ = batched_message_log_to_flat_message(batch, {"token_ids": -1}, make_sequence_length_divisible_by=4)
    assert rows["token_ids"][0] == [1, 2, 3, 4, 5, 6, 7, -1, -1, -1, -1, -1]
    assert len(rows["token_ids"][1]) == 12


def test_padding_all_grpo_fields_and_keeping_strings():
    short = nemo_rl.add_loss_fields(message_log(GOLDEN[:1]))
    long = nemo_rl.add_loss_fields(message_log(GOLDEN))
    rows, lengths = batched_message_log_to_flat_message([short, long], {"token_ids": 151643})
    assert lengths == [3, 7]
    assert rows["token_ids"][0] == [1, 2, 3] + [151643] * 4
    assert rows["token_loss_mask"] == [[0, 0, 1, 0, 0, 0, 0], [0, 0, 1, 0, 0, 1, 1]]
    assert rows["generation_logprobs"][0] == [0.0, 0.0, -0.1, 0, 0, 0, 0]
    assert rows["role"] == [["user", "assistant"], ["user", "assistant", "user", "assistant"]]


def test_non_contiguous_history_names_item_and_position():
    rewritten = _item([1, 2, 3, 4, 5], [6], [-0.2])
    with pytest.raises(ContiguityError) as e:
        flatten([_item([1, 2], [3, 7], [-0.1, -0.1]), {"type": "function_call_output"}, rewritten])
    assert isinstance(e.value, AssertionError)
    message = str(e.value)
    assert message.startswith("Non-contiguous messages found!")
    assert "item 2" in message and "position 3" in message and "seen token 7" in message


def test_non_contiguous_shorter_prompt():
    with pytest.raises(ContiguityError, match=r"position 2 .*fewer than the 3 seen"):
        message_log([GOLDEN[0], _item([1, 2], [3], [-0.1])])


def test_no_generation_data():
    with pytest.raises(ValueError, match="no generation data"):
        flatten([{"type": "function_call_output"}, _item([1], [], [])])
    with pytest.raises(ValueError, match="no generation data"):
        flatten({"output": []})


def test_nan_logprob_is_a_runtime_error():
    with pytest.raises(RuntimeError, match="item 1: NaN .* position 1"):
        flatten([GOLDEN[0], _item([1, 2, 3, 4, 5], [6, 7], [-0.2, math.nan])])


def test_ids_and_logprobs_must_have_equal_lengths():
    with pytest.raises(ValueError, match="item 0: 2 generation_token_ids but 1 generation_log_probs"):
        flatten([_item([1], [2, 3], [-0.1])])
    with pytest.raises(ValueError, match="item 0: 1 generation_token_ids but 0"):
        flatten([{"prompt_token_ids": [1], "generation_token_ids": [2]}])


def test_trainable_item_needs_prompt_ids():
    with pytest.raises(ValueError, match="no prompt_token_ids"):
        flatten([{"generation_token_ids": [2], "generation_log_probs": [-1.0]}])


@pytest.mark.parametrize(
    ("components", "ok"),
    [
        ({"tests": 0.6, "format": 0.4}, True),
        ({"tests": 0.6, "format": 0.4000005}, True),  # within abs 1e-6
        ({"tests": 0.6, "format": 0.41}, False),
        ({"tests": 0.9}, False),
        ({}, True),  # empty: no components, nothing to check
    ],
)
def test_reward_components_must_sum_to_reward(components, ok):
    result = {"response": {"output": GOLDEN}, "reward": 1.0, "reward_components": components}
    if ok:
        assert postprocess_result(result)["total_reward"] == 1.0
    else:
        with pytest.raises(ValueError, match="reward_components sum to"):
            postprocess_result(result)


def test_reward_component_tolerance_is_relative_for_large_rewards():
    result = {"response": {"output": GOLDEN}, "reward": 1000.0, "reward_components": {"a": 999.995}}
    assert flatten(result).reward == 1000.0  # 5e-3 off: inside rel 1e-5
    result["reward_components"] = {"a": 999.98}
    with pytest.raises(ValueError):
        flatten(result)


def test_reward_is_required():
    with pytest.raises(ValueError, match="no 'reward'"):
        flatten({"response": {"output": GOLDEN}})


def test_postprocess_result_and_mask_sample():
    result = {"response": {"output": GOLDEN}, "reward": 0.0, "instance_config": {"mask_sample": True}}
    out = postprocess_result(result)
    assert out["input_message_log"] == out["message_log"][:1] and out["input_message_log"][0]["token_ids"] == [1, 2]
    assert out["loss_multiplier"] == 0.0
    assert nemo_rl.loss_multiplier(result, should_mask_flagged_samples=False) == 1.0
    assert flatten(result).loss_multiplier == 0.0


def test_input_is_not_mutated():
    items = [dict(i) for i in GOLDEN]
    flatten(items)
    assert items == GOLDEN and "prompt_token_ids" in items[0]


def test_module_doctests():
    failures, tried = doctest.testmod(nemo_rl)
    assert tried > 0 and failures == 0
