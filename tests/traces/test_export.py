"""Exports of traces: NeMo Gym output items, judged by NeMo-RL's own post-processing of Gym results
(run from the checkout NEMO_RL_DIR names), and JSONL."""

from __future__ import annotations

import json
import math
import random

import pytest

from nemo_polar.traces.export import (
    JSONL_KEYS,
    envelope_trace,
    gym_output_items,
    gym_response,
    gym_result,
    read_jsonl,
    training_traces,
    write_jsonl,
)
from nemo_polar.traces.models import BuildResult, BuildStats, Segment, Trace

from ..conftest import nemo_rl_judge, requires_nemo_rl

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


def _as_run(items: list[dict], reward: float = 0.0, **fields) -> dict:
    return {"responses_create_params": {"input": []}, "response": {"output": items}, "reward": reward} | fields


def _random_traces() -> list[Trace]:
    rng = random.Random(7)
    traces = [_random_trace(rng) for _ in range(200)]
    return [t for t in traces if any(s.trained and s.end > s.start for s in t.segments)]


@pytest.fixture(scope="module")
def judged() -> dict[str, list[dict]]:
    """Every export below, through NeMo-RL's post-processing in one run of its Python."""
    broken = gym_output_items(_trace())
    broken[1]["prompt_token_ids"][4] = 77  # what a rewritten history looks like
    cases = {
        "two": [_as_run(gym_output_items(_trace()))],
        "shared": [_as_run(gym_output_items(_trace(trained=(False, True), mask=(0, 0, 0, 0, 0, 1, 1, 1))))],
        "last_untrained": [_as_run(gym_output_items(_trace(mask=(1, 1, 1, 0, 0, 0, 0, 0), trained=(True, False))))],
        "broken": [_as_run(broken)],
        "random": [_as_run(gym_output_items(t)) for t in _random_traces()],
        "result": [gym_result(_trace(), reward=1.0, reward_components={"tests": 0.75, "style": 0.25})],
        "bad_sum": [gym_result(_trace(), reward=1.0, reward_components={"tests": 0.5})],
        # every chain of a forked session, each a result of its own (one chain per call of NeMo-RL's function),
        # then both chains in one output, as NeMo-RL at our commit would be handed them
        "chains": [_as_run(gym_output_items(envelope_trace(e))) for e in _forked_envelope()["traces"]],
        "chains_in_one": [_as_run(gym_output_items(_trace()) + gym_output_items(_fork()))],
    }
    flat = [r for results in cases.values() for r in results]
    answers = iter(nemo_rl_judge(flat))
    return {name: [next(answers) for _ in results] for name, results in cases.items()}


def _fork() -> Trace:
    """The session's other chain: r1's answer, other tool output, r3's own answer; r1 is trained in `_trace()`."""
    return Trace(
        prompt_ids=PROMPT,
        response_ids=[10, 11, 99, 60, 61, 30, 31, 32, 99],
        loss_mask=[0, 0, 0, 0, 0, 1, 1, 1, 1],
        response_logprobs=[0.0] * 5 + [-0.4, -0.5, -0.6, -0.7],
        record_ids=["r1", "r3"],
        segments=[
            Segment(record_id="r1", start=0, end=3, trained=False),
            Segment(record_id="r3", start=5, end=9, trained=True),
        ],
    )


def _forked_envelope() -> dict:
    return training_traces([_trace(), _fork()], "s1")


def _assert_flattens_to_trace(trace: Trace, sample: dict) -> None:
    """NeMo-RL's sample is the trace up to its last trained token: user messages (context) and assistant
    messages (the trained tokens, with the server's logprobs), one assistant message per trained call."""
    assert "error" not in sample, sample.get("error")
    end = max(s.end for s in trace.segments if s.trained and s.end > s.start)  # an empty call trains nothing
    tokens, mask, logprobs = [], [], []
    for m in sample["message_log"]:
        tokens += m["token_ids"]
        mask += [int(m["role"] == "assistant")] * len(m["token_ids"])
        logprobs += m.get("generation_logprobs") or [0.0] * len(m["token_ids"])
    assert tokens == trace.prompt_ids + trace.response_ids[:end]
    assert mask == [0] * len(trace.prompt_ids) + trace.loss_mask[:end]
    assert logprobs == pytest.approx([0.0] * len(trace.prompt_ids) + trace.response_logprobs[:end])
    turns = sum(1 for s in trace.segments if s.trained and s.end > s.start)
    assert sum(m["role"] == "assistant" for m in sample["message_log"]) == turns
    assert sample["input_ids"] == sample["message_log"][0]["token_ids"]  # GRPO's group key: the first prompt


# --- every chain ----------------------------------------------------------------------------------
def test_the_envelope_has_every_chain_each_span_owned_once():
    envelope = _forked_envelope()
    assert (envelope["schema_version"], envelope["rollout_id"], envelope["builder"]) == (1, "s1", "prefix_merging")
    main, fork = envelope["traces"]
    assert [main["trace_id"], fork["trace_id"]] == ["s1:r2", "s1:r3"]
    assert main["token_ids"] == PROMPT + RESPONSE and len(main["loss_mask"]) == len(main["generation_logprobs"]) == 11
    owners = [
        (e["trace_id"], s["model_call_id"]) for e in envelope["traces"] for s in e["sampled_spans"] if s["owned"]
    ]
    assert owners == [("s1:r2", "r1"), ("s1:r2", "r2"), ("s1:r3", "r3")]  # r1, shared, is trained once
    assert fork["sampled_spans"][0] == {"model_call_id": "r1", "start": 3, "end": 6, "owned": False}
    assert sum(map(sum, (e["loss_mask"] for e in envelope["traces"]))) == 3 + 3 + 4  # the unique sampled tokens
    assert [envelope_trace(e) for e in envelope["traces"]] == [_trace(), _fork()]  # and back, exactly


def test_an_envelope_refuses_a_span_trained_twice():
    twice = _fork().model_copy(update={"loss_mask": [1, 1, 1, 0, 0, 1, 1, 1, 1]})
    twice.segments[0].trained = True
    with pytest.raises(ValueError, match="r1 is trained in traces 0 and 1"):
        training_traces([_trace(), twice], "s1")


@requires_nemo_rl
def test_nemo_rl_takes_each_chain_as_a_row_of_its_own(judged):
    """What a NeMo-RL with multi-trace training would read: each envelope trace, made into Gym items as the primary
    is, passes NeMo-RL's own post-processing as a row and flattens to exactly that chain; the same two chains in
    one output fail it, as at the commit we target."""
    for trace, sample in zip([_trace(), _fork()], judged["chains"], strict=True):
        _assert_flattens_to_trace(trace, sample)
    (together,) = judged["chains_in_one"]
    assert "Non-contiguous messages found" in together["error"]


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


@requires_nemo_rl
def test_nemo_rl_reads_two_trained_calls_back_as_the_trace(judged):
    _assert_flattens_to_trace(_trace(), judged["two"][0])


def test_untrained_shared_segment_is_part_of_the_next_prompt():
    trace = _trace(mask=(0, 0, 0, 0, 0, 1, 1, 1), trained=(False, True))
    items = gym_output_items(trace)
    assert len(items) == 1 and items[0]["id"] == "msg_r2"
    assert items[0]["prompt_token_ids"] == PROMPT + RESPONSE[:5]


@requires_nemo_rl
def test_nemo_rl_reads_a_shared_segment_as_context(judged):
    _assert_flattens_to_trace(_trace(mask=(0, 0, 0, 0, 0, 1, 1, 1), trained=(False, True)), judged["shared"][0])


def test_untrained_last_segment_is_left_out():
    trace = _trace(mask=(1, 1, 1, 0, 0, 0, 0, 0), trained=(True, False))
    items = gym_output_items(trace)
    assert [i["generation_token_ids"] for i in items] == [[10, 11, 99]]


@requires_nemo_rl
def test_nemo_rl_ends_the_sample_at_the_last_trained_token(judged):
    trace = _trace(mask=(1, 1, 1, 0, 0, 0, 0, 0), trained=(True, False))
    _assert_flattens_to_trace(trace, judged["last_untrained"][0])


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


def test_a_trace_carries_its_calls_text():
    """The gateway node keeps each call's message in the trace, so its export has the text without the store."""
    trace = _trace(metadata={"messages": {"r1": {"content": "first"}, "r2": {"content": "second"}}})
    assert [i["content"][0]["text"] for i in gym_output_items(trace)] == ["first", "second"]


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


@requires_nemo_rl
def test_nemo_rl_refuses_a_broken_export(judged):
    assert "Non-contiguous messages found" in judged["broken"][0]["error"]


@requires_nemo_rl
def test_random_chains_flatten_back_to_the_trace(judged):
    for trace, sample in zip(_random_traces(), judged["random"], strict=True):
        _assert_flattens_to_trace(trace, sample)


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


def test_gym_response_marks_a_length_stop_incomplete():
    response = gym_response(_trace(metadata={"finish_reason": "length"}))
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}


def test_gym_result_shape():
    result = gym_result(_trace(), reward=1.0, reward_components={"tests": 0.75, "style": 0.25}, num_tool_calls=2)
    assert result["num_tool_calls"] == 2 and result["reward"] == 1.0
    assert gym_result(_trace(reward=0.5))["reward"] == 0.5
    with pytest.raises(ValueError, match="needs a reward"):
        gym_result(_trace())


@requires_nemo_rl
def test_nemo_rl_takes_the_reward_and_checks_its_components(judged):
    (sample,) = judged["result"]
    assert sample["total_reward"] == 1.0 and sample["mask_sample"] is False
    _assert_flattens_to_trace(_trace(), sample)
    assert "reward_components" in judged["bad_sum"][0]["error"]  # they must sum to the reward


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
