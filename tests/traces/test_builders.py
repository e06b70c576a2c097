"""Golden vectors for both builders on literal token ids (end-of-turn = 99)."""

from __future__ import annotations

import random

import pytest

from nemo_polar.errors import TraceBuildError
from nemo_polar.records import CompletionRecord, UpstreamInfo
from nemo_polar.traces import build

EOT = 99
_UP = UpstreamInfo(engine="vllm", url="http://x", model="m")


def rec(rid: str, seq: int, prompt: list[int], sample: list[int], logprobs=None, finish="stop", status="ok"):
    lps = logprobs if logprobs is not None else [-(i + 1) / 10 for i in range(len(sample))]
    return CompletionRecord(
        id=rid,
        session_id="s",
        seq=seq,
        started_at=seq,
        finished_at=seq,
        dialect="openai_chat",
        stream=False,
        native_request={},
        prompt_token_ids=prompt,
        completion_token_ids=sample,
        completion_logprobs=lps,
        finish_reason=finish,
        upstream=_UP,
        status=status,
    )


def assert_faithful(result, records):
    """Every mask-1 position holds the sampled token and its logprob; every sample is trained once."""
    by_id = {r.id: r for r in records}
    trained = []
    for t in result.traces:
        assert len(t.response_ids) == len(t.loss_mask) == len(t.response_logprobs)
        for s in t.segments:
            r = by_id[s.record_id]
            assert t.response_ids[s.start : s.end] == r.completion_token_ids[: s.end - s.start]
            if s.trained:
                trained.append(s.record_id)
                assert t.loss_mask[s.start : s.end] == [1] * (s.end - s.start)
                assert t.response_logprobs[s.start : s.end] == r.completion_logprobs[: s.end - s.start]
        assert sum(t.loss_mask) == sum(s.end - s.start for s in t.segments if s.trained)
    ok = [r.id for r in records if r.status == "ok" and r.completion_token_ids]
    assert sorted(trained) == sorted(ok)


LINEAR = [
    rec("c1", 0, [1, 2, 3], [10, 11, EOT], [-0.1, -0.2, -0.3]),
    rec("c2", 1, [1, 2, 3, 10, 11, EOT, 50, 51], [20, 21, EOT], [-0.5, -0.6, -0.7]),
]


def test_linear_chain_merges_into_one_trace():
    result = build(LINEAR)
    (t,) = result.traces
    assert t.prompt_ids == [1, 2, 3]
    assert t.response_ids == [10, 11, EOT, 50, 51, 20, 21, EOT]
    assert t.loss_mask == [1, 1, 1, 0, 0, 1, 1, 1]
    assert t.response_logprobs == [-0.1, -0.2, -0.3, 0.0, 0.0, -0.5, -0.6, -0.7]
    assert result.stats.merged == 1 and result.stats.drift == {} and result.stats.unique_tokens == 11
    assert_faithful(result, LINEAR)


def test_per_request_repeats_the_prompt():
    result = build(LINEAR, "per_request")
    assert [t.prompt_ids for t in result.traces] == [[1, 2, 3], [1, 2, 3, 10, 11, EOT, 50, 51]]
    assert result.stats.trace_tokens == 6 + 11 and result.stats.unique_tokens == 11
    assert_faithful(result, LINEAR)


def test_interleaved_sub_agents_in_any_order_give_the_same_traces():
    main = [
        rec("m1", 0, [1, 2], [10, EOT]),
        rec("m2", 2, [1, 2, 10, EOT, 5], [11, EOT]),
        rec("m3", 4, [1, 2, 10, EOT, 5, 11, EOT, 6], [12, EOT]),
    ]
    sub = [rec("s1", 1, [7, 8], [30, EOT]), rec("s2", 3, [7, 8, 30, EOT, 9], [31, EOT])]
    records = main + sub
    first = build(records)
    for seed in range(5):
        shuffled = records[:]
        random.Random(seed).shuffle(shuffled)
        assert build(shuffled).traces == first.traces
    assert [t.record_ids for t in first.traces] == [["m1", "m2", "m3"], ["s1", "s2"]]
    assert_faithful(first, records)


def test_branches_share_a_span_trained_once():
    records = [
        rec("a", 0, [1], [10, EOT]),
        rec("b", 1, [1, 10, EOT, 5], [20, EOT]),
        rec("c", 2, [1, 10, EOT, 6], [21, EOT]),
    ]
    result = build(records)
    assert len(result.traces) == 2
    assert [s.trained for s in result.traces[1].segments] == [False, True]
    assert result.traces[1].loss_mask[:2] == [0, 0]
    assert_faithful(result, records)


def test_compaction_forks_and_loses_nothing():
    # ChatML-like: system [1, EOT], user [2, EOT], generation prompt [8]; at c3 a summary replaces the history
    records = [
        rec("c1", 0, [1, EOT, 2, EOT, 8], [10, EOT]),
        rec("c2", 1, [1, EOT, 2, EOT, 8, 10, EOT, 3, EOT, 8], [11, EOT]),
        rec("c3", 2, [1, EOT, 77, 78, EOT, 8], [12, EOT]),
        rec("c4", 3, [1, EOT, 77, 78, EOT, 8, 12, EOT, 4, EOT, 8], [13, EOT]),
    ]
    result = build(records)
    assert result.stats.drift == {"compaction": 1} and result.stats.repaired == {}
    assert [t.record_ids for t in result.traces] == [["c1", "c2"], ["c3", "c4"]]
    assert_faithful(result, records)


def test_length_truncated_turn_is_closed_in_the_merged_trace():
    records = [rec("c1", 0, [1, 2], [10, 11], finish="length"), rec("c2", 1, [1, 2, 10, 11, EOT, 5], [20, EOT])]
    (t,) = build(records, eot_token_id=EOT).traces
    assert t.response_ids == [10, 11, EOT, 5, 20, EOT] and t.loss_mask == [1, 1, 0, 0, 1, 1]


def test_repaired_boundary_keeps_the_raw_sample():
    # the next prompt re-tokenised the sampled [10, 11] as [12]: the trace keeps what was sampled
    records = [rec("c1", 0, [1, 2], [10, 11, EOT]), rec("c2", 1, [1, 2, 12, EOT, 5], [20, EOT])]
    result = build(records)
    (t,) = result.traces
    assert t.response_ids == [10, 11, EOT, 5, 20, EOT] and t.loss_mask == [1, 1, 1, 0, 1, 1]
    assert result.stats.repaired == {"retokenization": 1}
    assert t.metadata["repairs"][0]["record_id"] == "c2"
    no_repair = build(records, repair=False)
    assert len(no_repair.traces) == 2 and no_repair.stats.drift == {"retokenization": 1}
    assert_faithful(no_repair, records)


def test_missing_logprobs_on_a_trainable_span_is_an_error():
    with pytest.raises(TraceBuildError, match="c2"):
        build([LINEAR[0], rec("c2", 1, [1, 2, 3, 10, 11, EOT, 50], [20, EOT], logprobs=[])])


def test_failed_calls_are_skipped_and_counted():
    records = LINEAR + [rec("bad", 2, [1], [], status="upstream_error")]
    result = build(records)
    assert result.stats.skipped == {"upstream_error": 1} and len(result.traces) == 1


def test_length_policy_keeps_the_causal_prefix():
    result = build(LINEAR, max_tokens=7)
    (t,) = result.traces
    assert t.prompt_ids == [1, 2, 3] and t.response_ids == [10, 11, EOT, 50]
    assert t.metadata["truncated"] and result.stats.truncated == 1
    (short,) = build(LINEAR, max_tokens=2).traces
    assert short.prompt_ids == [1, 2, 3] and short.response_ids == []


def test_a_long_chain_compares_each_call_with_its_parent_alone(monkeypatch):
    """Placing a call tries the earlier calls longest first: in a chain, the parent is the first tried,
    so a 300-call session costs 300 prefix comparisons, not 45,000."""
    from nemo_polar.traces import builders

    tried = []
    extends = builders._extends
    monkeypatch.setattr(builders, "_extends", lambda prompt, parent: tried.append(1) or extends(prompt, parent))
    prompt, records = [1, 2, 3], []
    for i in range(300):
        sample = [1000 + i, EOT]
        records.append(rec(f"c{i}", i, list(prompt), sample))
        prompt = prompt + sample + [50 + i % 40, 51]
    result = build(records)
    assert result.stats.traces == 1 and result.stats.merged == 299
    assert len(tried) == 299
    assert_faithful(result, records)
