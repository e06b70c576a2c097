"""Exports of traces: NeMo Gym output items (checked by the NeMo-RL re-implementation) and JSONL."""

from __future__ import annotations

import json
import math
import random

import pytest

from nemo_polar.traces.export import (
    JSONL_KEYS,
    gym_output_items,
    gym_response,
    gym_result,
    read_jsonl,
    write_jsonl,
)
from nemo_polar.traces.models import BuildResult, BuildStats, Segment, Trace
from nemo_polar.traces.nemo_rl import ContiguityError, flatten

PROMPT = [1, 2, 3]
RESPONSE = [10, 11, 99, 50, 51, 20, 21, 99]  # r1 samples [10,11,99]; [50,51] tool output; r2 samples [20,21,99]
LOGPROBS = [-0.1, -0.2, -0.3, 0.0, 0.0, -0.5, -0.6, -0.7]


def _trace(mask=(1, 1, 1, 0, 0, 1, 1, 1), trained=(True, True), **kw) -> Trace:
    logprobs = [lp if m else 0.0 for lp, m in zip(LOGPROBS, mask, strict=True)]
    segments = [Segment(record_id="r1", start=0, end=3, trained=trained[0])]
    segments.append(Segment(record_id="r2", start=5, end=8, trained=trained[1]))
    fields = {"record_ids": ["r1", "r2"]} | kw
    return Trace(
        prompt_ids=PROMPT,
        response_ids=RESPONSE,
        loss_mask=list(mask),
        response_logprobs=logprobs,
        segments=segments,
        **fields,
    )


def _assert_flattens_to_trace(trace: Trace, items: list[dict]) -> None:
    """NeMo-RL's row is the trace up to its last trained token, with the trace's mask and logprobs."""
    end = max(s.end for s in trace.segments if s.trained and s.end > s.start)  # an empty call trains nothing
    flat = flatten(items)
    assert flat.token_ids == trace.prompt_ids + trace.response_ids[:end]
    assert flat.token_mask == [0] * len(trace.prompt_ids) + trace.loss_mask[:end]
    assert flat.generation_logprobs == [0.0] * len(trace.prompt_ids) + trace.response_logprobs[:end]
    assert flat.turns == sum(1 for s in trace.segments if s.trained and s.end > s.start)


# --- Gym output items ---------------------------------------------------------------------------
def test_two_trained_calls_become_two_items():
    trace = _trace()
    items = gym_output_items(trace)
    assert [i["id"] for i in items] == ["msg_r1", "msg_r2"]
    assert items[0]["prompt_token_ids"] == [1, 2, 3]
    assert items[0]["generation_token_ids"] == [10, 11, 99]
    assert items[0]["generation_log_probs"] == [-0.1, -0.2, -0.3]
    assert items[1]["prompt_token_ids"] == [1, 2, 3, 10, 11, 99, 50, 51]
    assert items[1]["generation_token_ids"] == [20, 21, 99]
    assert items[1]["generation_log_probs"] == [-0.5, -0.6, -0.7]
    for item in items:
        assert item["type"] == "message" and item["role"] == "assistant" and item["status"] == "completed"
        assert item["content"] == [{"type": "output_text", "text": "", "annotations": []}]
    _assert_flattens_to_trace(trace, items)


def test_untrained_shared_segment_is_part_of_the_next_prompt():
    trace = _trace(mask=(0, 0, 0, 0, 0, 1, 1, 1), trained=(False, True))
    items = gym_output_items(trace)
    assert len(items) == 1 and items[0]["id"] == "msg_r2"
    assert items[0]["prompt_token_ids"] == PROMPT + RESPONSE[:5]
    _assert_flattens_to_trace(trace, items)


def test_untrained_last_segment_is_left_out():
    trace = _trace(mask=(1, 1, 1, 0, 0, 0, 0, 0), trained=(True, False))
    items = gym_output_items(trace)
    assert [i["generation_token_ids"] for i in items] == [[10, 11, 99]]
    assert flatten(items).token_ids == PROMPT + RESPONSE[:3]
    _assert_flattens_to_trace(trace, items)


def test_records_give_text_reasoning_and_tool_calls_with_tokens_on_the_last_item():
    calls = [
        {"id": "call_a", "name": "read", "arguments": '{"p": 1}'},
        {"id": "call_b", "name": "ls", "arguments": "{}"},
    ]
    records = {
        "r1": {"message": {"content": "", "reasoning": "look first", "tool_calls": calls}},
        "r2": {"message": {"content": "done", "reasoning": None, "tool_calls": []}},
    }
    trace = _trace()
    items = gym_output_items(trace, records)
    assert [i["type"] for i in items] == ["reasoning", "function_call", "function_call", "message"]
    assert items[0]["summary"] == [{"type": "summary_text", "text": "look first"}]
    assert [(i["call_id"], i["name"], i["arguments"]) for i in items[1:3]] == [
        ("call_a", "read", '{"p": 1}'),
        ("call_b", "ls", "{}"),
    ]
    assert items[3]["content"][0]["text"] == "done"
    carriers = [i for i, item in enumerate(items) if "generation_token_ids" in item]
    assert carriers == [2, 3]  # the last item of each call
    _assert_flattens_to_trace(trace, items)


def test_records_as_completion_record_objects():
    class Rec:  # anything with a `.message`, like CompletionRecord
        message = {"content": "hi", "tool_calls": [{"id": "c1", "name": "f", "arguments": "{}"}]}

    items = gym_output_items(_trace(), {"r1": Rec()})
    assert [i["type"] for i in items] == ["message", "function_call", "message"]
    assert items[0]["content"][0]["text"] == "hi" and "generation_token_ids" not in items[0]
    assert items[1]["generation_token_ids"] == [10, 11, 99]


def test_mask_and_trained_segments_must_agree():
    with pytest.raises(ValueError, match="disagree at response position 3"):
        gym_output_items(_trace(mask=(1, 1, 1, 1, 0, 1, 1, 1)))  # a trained token no segment covers
    with pytest.raises(ValueError, match="disagree at response position 0"):
        gym_output_items(_trace(trained=(False, True)))  # r1's tokens masked 1 but its segment untrained


def test_overlapping_or_out_of_range_segments_are_refused():
    trace = _trace()
    trace.segments[1] = Segment(record_id="r2", start=2, end=8, trained=True)
    with pytest.raises(ValueError, match="overlap"):
        gym_output_items(trace)
    trace.segments[1] = Segment(record_id="r2", start=5, end=9, trained=True)
    with pytest.raises(ValueError, match="outside 0..8"):
        gym_output_items(trace)


def test_trace_without_trained_tokens_is_refused():
    with pytest.raises(ValueError, match="no trained tokens"):
        gym_output_items(_trace(mask=(0,) * 8, trained=(False, False)))


def test_flatten_catches_a_broken_export():
    items = gym_output_items(_trace())
    items[1]["prompt_token_ids"][4] = 77  # what a rewritten history looks like
    with pytest.raises(ContiguityError, match="position 4"):
        flatten(items)


def test_random_chains_flatten_back_to_the_trace():
    rng = random.Random(7)
    for _ in range(200):
        trace = _random_trace(rng)
        if not any(s.trained and s.end > s.start for s in trace.segments):
            continue
        _assert_flattens_to_trace(trace, gym_output_items(trace))


def _random_trace(rng: random.Random) -> Trace:
    prompt = [rng.randrange(1000) for _ in range(rng.randint(1, 6))]
    response, mask, logprobs, segments = [], [], [], []
    for n in range(rng.randint(1, 5)):
        glue = rng.randint(0, 4)  # tool output / template tokens before the call
        response += [rng.randrange(1000) for _ in range(glue)]
        mask += [0] * glue
        logprobs += [0.0] * glue
        start, size, trained = len(response), rng.randint(0, 4), rng.random() < 0.7
        response += [rng.randrange(1000) for _ in range(size)]
        mask += [int(trained)] * size
        logprobs += [-rng.random() if trained else 0.0 for _ in range(size)]
        segments.append(Segment(record_id=f"r{n}", start=start, end=start + size, trained=trained))
    return Trace(
        prompt_ids=prompt,
        response_ids=response,
        loss_mask=mask,
        response_logprobs=logprobs,
        record_ids=[s.record_id for s in segments],
        segments=segments,
    )


def test_gym_response_object():
    trace = _trace()
    response = gym_response(trace, model="policy_model", created_at=1700000000.5)
    assert response["object"] == "response" and response["status"] == "completed"
    assert response["model"] == "policy_model" and response["created_at"] == 1700000000
    assert response["id"].startswith("resp_") and response["id"] == gym_response(_trace())["id"]
    assert response["id"] != gym_response(_trace(record_ids=["r1", "r2", "r3"]))["id"]
    assert response["output"] == gym_output_items(trace)
    assert gym_response(trace, response_id="resp_x")["id"] == "resp_x"
    json.dumps(response)  # plain JSON
    _assert_flattens_to_trace(trace, response["output"])


def test_gym_response_marks_a_length_stop_incomplete():
    response = gym_response(_trace(metadata={"finish_reason": "length"}))
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}


def test_gym_result_passes_the_reward_check():
    result = gym_result(_trace(), reward=1.0, reward_components={"tests": 0.75, "style": 0.25}, num_tool_calls=2)
    flat = flatten(result)
    assert flat.reward == 1.0 and flat.token_ids == PROMPT + RESPONSE
    assert result["num_tool_calls"] == 2
    assert gym_result(_trace(reward=0.5))["reward"] == 0.5
    with pytest.raises(ValueError, match="needs a reward"):
        gym_result(_trace())
    with pytest.raises(ValueError, match="reward_components sum"):
        flatten(gym_result(_trace(), reward=1.0, reward_components={"tests": 0.5}))


# --- JSONL ----------------------------------------------------------------------------------------
def _result() -> BuildResult:
    shared = _trace(mask=(0, 0, 0, 0, 0, 1, 1, 1), trained=(False, True), metadata={"repairs": []})
    return BuildResult(
        builder="prefix_tree", traces=[_trace(metadata={"finish_reason": "stop"}), shared], stats=BuildStats()
    )


def test_jsonl_round_trip(tmp_path):
    path = tmp_path / "traces.jsonl"
    result = _result()
    assert write_jsonl(result, path, session_id="s1") == 2
    assert read_jsonl(path) == result.traces


def test_jsonl_line_schema(tmp_path):
    path = tmp_path / "traces.jsonl"
    write_jsonl(_result(), path, session_id="s1", reward=0.25)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [list(row) for row in rows] == [list(JSONL_KEYS)] * 2
    assert [(r["session_id"], r["trace_index"], r["reward"]) for r in rows] == [("s1", 0, 0.25), ("s1", 1, 0.25)]
    assert rows[0]["loss_mask"] == [1, 1, 1, 0, 0, 1, 1, 1]
    assert rows[1]["segments"][0] == {"record_id": "r1", "start": 0, "end": 3, "trained": False}
    assert rows[0]["metadata"] == {"finish_reason": "stop"}
    assert [t.reward for t in read_jsonl(path)] == [0.25, 0.25]


def test_jsonl_keeps_trace_reward_and_accepts_a_list(tmp_path):
    path = tmp_path / "t.jsonl"
    write_jsonl([_trace(reward=-1.0), _trace()], path)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["session_id"], r["reward"]) for r in rows] == [(None, -1.0), (None, None)]


def test_jsonl_refuses_nan_and_bad_lengths(tmp_path):
    path = tmp_path / "t.jsonl"
    bad = _trace()
    bad.response_logprobs[0] = math.nan
    with pytest.raises(ValueError, match="trace 1: NaN"):
        write_jsonl([_trace(), bad], path)
    assert not path.exists()  # nothing half-written
    short = _trace()
    short.loss_mask.pop()
    with pytest.raises(ValueError, match="trace 0: 8 response_ids, 7 loss_mask"):
        write_jsonl([short], path)


def test_read_jsonl_reports_the_bad_line(tmp_path):
    path = tmp_path / "t.jsonl"
    write_jsonl([_trace()], path)
    good = path.read_text()
    row = json.loads(good)
    row["response_logprobs"] = row["response_logprobs"][:-1]
    path.write_text(good + "\n" + json.dumps(row) + "\n")  # a blank line is fine
    with pytest.raises(ValueError, match=r"t.jsonl:3: 8 response_ids"):
        read_jsonl(path)
    path.write_text(good + '{"prompt_ids": [1]}\n')
    with pytest.raises(ValueError, match=r"t.jsonl:2: not a trace"):
        read_jsonl(path)
    path.write_text(good.replace("-0.1", "NaN"))
    with pytest.raises(ValueError, match=r"t.jsonl:1: not a trace: NaN"):
        read_jsonl(path)
