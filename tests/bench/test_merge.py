"""`polar bench merge`: the generated corpus, the reference's linear-chain baseline, the report's figures.

Figures are checked for consistency with each other, never against targets or timings.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

from nemo_polar.bench import merge, merge_corpus, merge_report
from nemo_polar.bench.linear_chain import linear_chains
from nemo_polar.records import CompletionRecord, Session, UpstreamInfo
from nemo_polar.traces import trie_size, unique_tokens
from nemo_polar.traces.models import Segment, Trace

UP = UpstreamInfo(engine="vllm", url="http://x", model="m")
EOT = 99


def rec(seq: int, prompt: list[int], sample: list[int], finish: str = "stop", sid: str = "s") -> CompletionRecord:
    return CompletionRecord(
        id=f"{sid}-{seq}",
        session_id=sid,
        seq=seq,
        started_at=100.0 + seq,
        finished_at=100.5 + seq,
        dialect="openai_chat",
        stream=False,
        native_request={},
        prompt_token_ids=prompt,
        completion_token_ids=sample,
        completion_logprobs=[-0.1 * (k + 1) for k in range(len(sample))],
        finish_reason=finish,
        upstream=UP,
    )


# --- the reference's linear chains --------------------------------------------------------------


def test_linear_chain_is_the_reference_worked_example():
    # research/polar.md 3.4: raw samples kept, the tail after the re-rendered turn's EOT between them
    records = [rec(0, [1, 2, 3], [10, 11, EOT]), rec(1, [1, 2, 3, 10, 11, EOT, 50, 51], [20, 21, EOT])]
    out = linear_chains(records)
    (t,) = out.traces
    assert t.prompt_ids == [1, 2, 3]
    assert t.response_ids == [10, 11, EOT, 50, 51, 20, 21, EOT]
    assert t.loss_mask == [1, 1, 1, 0, 0, 1, 1, 1]
    assert t.response_logprobs == pytest.approx([-0.1, -0.2, -0.3, 0, 0, -0.1, -0.2, -0.3])
    assert [(s.record_id, s.start, s.end) for s in t.segments] == [("s-0", 0, 3), ("s-1", 5, 8)]
    assert (out.chains, out.dropped_calls, out.truncated) == (1, 0, 0)


def test_linear_chain_keeps_the_raw_sample_and_closes_a_cut_turn():
    # the next prompt re-tokenized the sample ([12] instead of [10, 11]) and closed the cut turn with EOT
    records = [rec(0, [1, 2], [10, 11], finish="length"), rec(1, [1, 2, 12, EOT, 7], [20, EOT])]
    (t,) = linear_chains(records, eot_token_id=EOT).traces
    assert t.response_ids == [10, 11, EOT, 7, 20, EOT]
    assert t.loss_mask == [1, 1, 0, 0, 1, 1]


def test_linear_chain_routes_interleaved_agents_by_longest_tip():
    main = [
        rec(0, [1, 2], [10, EOT]),
        rec(2, [1, 2, 10, EOT, 5], [11, EOT]),
        rec(4, [1, 2, 10, EOT, 5, 11, EOT, 6], [EOT]),
    ]
    sub = [rec(1, [1, 3], [30, EOT]), rec(3, [1, 3, 30, EOT, 8], [31, EOT])]
    out = linear_chains(sub[:1] + main[:1] + sub[1:] + main[1:])  # list order is irrelevant
    assert out.chains == 2 and out.dropped_calls == 0
    assert sorted(len(t.segments) for t in out.traces) == [2, 3]


def test_linear_chain_truncates_at_a_break_and_drops_the_rest():
    # a retry with the same prompt joins the chain (its tip is a prefix) but has no turn to glue: break
    records = [rec(0, [1, 2], [10, EOT]), rec(1, [1, 2], [12, EOT]), rec(2, [1, 2, 12, EOT, 5], [13, EOT])]
    out = linear_chains(records)
    assert out.chains == 1 and out.truncated == 1
    assert out.dropped_calls == 2 and out.breaks == {"interstitial_split_failed": 1}
    (t,) = out.traces
    assert t.response_ids == [10, EOT] and t.record_ids == ["s-0"]


def test_linear_chain_breaks_without_an_end_of_turn_token():
    records = [rec(0, [1], [10], finish="length"), rec(1, [1, 10, 4], [11], finish="length")]
    out = linear_chains(records)
    assert out.breaks == {"eot_unavailable": 1} and out.dropped_calls == 1


def _walked_trie(sequences: list[list[int]]) -> int:
    """The plain definition: walk a dict trie, count the nodes created."""
    root: dict = {}
    count = 0
    for seq in sequences:
        node = root
        for tok in seq:
            if tok not in node:
                node[tok] = {}
                count += 1
            node = node[tok]
    return count


def test_trie_size_counts_like_unique_tokens():
    rng = random.Random(3)
    traces = []
    for _ in range(40):
        prompt = [rng.randint(0, 3) for _ in range(rng.randint(1, 12))]
        response = [rng.randint(0, 3) for _ in range(rng.randint(0, 6))]
        traces.append(
            Trace(
                prompt_ids=prompt,
                response_ids=response,
                loss_mask=[0] * len(response),
                response_logprobs=[0.0] * len(response),
                record_ids=["r"],
                segments=[Segment(record_id="r", start=0, end=0, trained=False)],
            )
        )
    traces.append(traces[0])  # a duplicate adds nothing
    sequences = [t.prompt_ids + t.response_ids for t in traces]
    assert trie_size(sequences) == unique_tokens(traces) == _walked_trie(sequences)


# --- the generated corpus -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer():
    return merge_corpus.qwen_tokenizer()


@pytest.fixture(scope="module")
def cases(tokenizer):
    return merge_corpus.generate(3, 0, tokenizer)


@pytest.fixture(scope="module")
def report(cases):
    return merge_report.report([merge.measure(c) for c in cases])


def test_plans_are_deterministic_and_within_the_brief():
    plans = [merge_corpus.plan(i, 7) for i in range(12)]
    assert plans == [merge_corpus.plan(i, 7) for i in range(12)]
    assert plans != [merge_corpus.plan(i, 8) for i in range(12)]
    assert {p.template for p in plans} == set(merge_corpus.TEMPLATES) and {p.habit for p in plans} == set(
        merge_corpus.HABITS
    )
    for p in plans:
        assert 30 <= p.turns <= 100
        assert len(p.sub_calls) <= 2 and sum(map(len, p.launches.values())) == len(p.sub_calls)
        for t, names in p.reports.items():
            assert t < p.turns - 1 and all(t > next(k for k, v in p.launches.items() if n in v) for n in names)


def test_generated_sessions_follow_their_plan(cases):
    for i, case in enumerate(cases):
        p = merge_corpus.plan(i, 0)
        records = case.records
        assert case.template == merge_corpus.TEMPLATES[i] and case.turns == p.turns
        assert len(records) == p.turns + sum(p.sub_calls.values())
        assert [r.seq for r in records] == list(range(len(records)))
        assert all(r.trainable and r.session_id == p.session_id for r in records)
        systems = [r.native_request["messages"][0]["content"] for r in records]
        agents = sum(merge_corpus.SUB_SYSTEM in s for s in systems)
        assert agents == sum(p.sub_calls.values())
        # a sub-agent's calls arrive after the main call that launched it, before the one after its report
        main_seq = [r.seq for r, s in zip(records, systems, strict=True) if merge_corpus.MAIN_SYSTEM in s]
        for t, names in p.launches.items():
            report = next(r for r, ns in p.reports.items() if set(names) & set(ns))
            subs = [r.seq for r in records if any(f"Find {n}" in str(r.native_request) for n in names)]
            subs = [q for q in subs if merge_corpus.SUB_SYSTEM in systems[q]]
            assert main_seq[t] < min(subs) and max(subs) < main_seq[report + 1]
        if case.compactions:
            assert any(merge_corpus.SUMMARIZE in str(r.native_request) for r in records)


def test_piece_encoding_is_the_tokenizer_s_encoding(cases, tokenizer):
    for case in cases:
        for r in (case.records[0], case.records[-1]):
            text = tokenizer.decode(r.prompt_token_ids, skip_special_tokens=False)
            assert tokenizer.encode(text, add_special_tokens=False) == r.prompt_token_ids


def test_linear_baseline_on_generated_sessions(cases):
    clean, empty_think = cases[0], cases[1]
    assert (clean.template, clean.habit, empty_think.template) == ("qwen25", "none", "qwen3_empty_think")
    # a template whose prompts extend each other: one chain per real chain, nothing dropped
    out = linear_chains(clean.records)
    assert out.chains == clean.real_chains and out.dropped_calls == 0
    # the empty think block: no prompt extends the previous one, every call is its own chain (polar.md 3.5)
    assert linear_chains(empty_think.records).chains == len(empty_think.records)


def test_report_is_one_consistent_json_object(report, cases):
    line = json.dumps(report)
    assert "\n" not in line and json.loads(line) == report
    for key in ("samples_ratio", "trained_over_unique", "false_forks", "build_tokens_per_s"):
        assert key in report
    b = report["builders"]
    pr, lin, tree = b["per_request"], b["linear_chain"], b["prefix_tree"]
    assert report["samples_ratio"] == round(pr["samples"] / tree["samples"], 4)
    assert report["trained_over_unique"] == round(tree["trace_tokens"] / tree["unique_tokens"], 4) >= 1.0
    ff = report["false_forks"]
    assert isinstance(ff, int) and ff >= 0 and ff == tree["false_roots"] + tree["false_branches"]
    assert report["build_tokens_per_s"] > 0
    corpus = report["corpus"]
    calls = sum(len(c.records) for c in cases)
    assert corpus["sessions_generated"] == 3 and corpus["calls"] == calls == pr["samples"]
    assert corpus["real_chains"] == sum(c.real_chains for c in cases)
    assert 30 <= corpus["turns_range"][0] <= corpus["turns_range"][1] <= 100
    # every sampled token trained once by per_request and prefix_tree; the baseline drops none here
    sampled = sum(len(r.completion_token_ids) for c in cases for r in c.records)
    assert pr["trained_tokens"] == tree["trained_tokens"] == lin["trained_tokens"] == sampled
    assert pr["dropped_tokens"] == tree["dropped_tokens"] == 0
    assert pr["trace_tokens"] == corpus["record_tokens"]
    assert tree["roots"] <= tree["samples"] <= pr["samples"]
    assert lin["false_forks"] == lin["samples"] - corpus["real_chains"]
    per_template = report["per_template"]
    assert set(per_template) == set(merge_corpus.TEMPLATES)
    for builder in merge_report.BUILDERS:
        assert sum(g[f"{builder}_samples"] for g in per_template.values()) == b[builder]["samples"]
    assert sum(g["false_forks"] for g in per_template.values()) == ff
    assert report["by_source"]["generated"]["prefix_tree"] == {
        k: tree[k] for k in report["by_source"]["generated"]["prefix_tree"]
    }
    for key, met in report["targets_met"].items():
        op, target = merge_report.TARGETS[key]
        assert met == {">=": report[key] >= target, "<=": report[key] <= target, "==": report[key] == target}[op]


# --- recorded stores and the command ------------------------------------------------------------


def _store(tmp_path):
    from nemo_polar.store import SqliteStore

    path = tmp_path / "records.sqlite"
    store = SqliteStore(path)
    store.add_session(Session(id="rec", api_key="k", created_at=1.0))
    for r in (rec(0, [1, 2, 3], [10, 11, EOT], sid="rec"), rec(1, [1, 2, 3, 10, 11, EOT, 50], [20, EOT], sid="rec")):
        store.add_record(r)
    store.flush()
    store.close()
    return path


def test_command_reports_recorded_sessions_apart(tmp_path):
    path = _store(tmp_path)
    cmd = [sys.executable, "-m", "nemo_polar.cli", "bench", "merge", "--json", "--sessions", "0", "--store", str(path)]
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120)
    assert done.stdout.count("\n") == 1
    out = json.loads(done.stdout)
    assert out["corpus"]["sessions_recorded"] == 1 and out["corpus"]["sessions_generated"] == 0
    recorded = out["by_source"]["recorded"]
    assert recorded["per_request"]["samples"] == 2 and recorded["prefix_tree"]["samples"] == 1
    assert recorded["linear_chain"]["samples"] == 1
    assert out["samples_ratio"] == 2.0 and out["false_forks"] == 0  # no ground truth: never a false fork


def test_a_missing_store_is_an_error_not_an_empty_corpus(tmp_path):
    with pytest.raises(FileNotFoundError):
        merge.run(stores=[str(tmp_path / "nope.sqlite")], sessions=0)
    assert not (tmp_path / "nope.sqlite").exists()


def test_run_is_the_report_of_its_corpus(cases):
    out = merge.run(sessions=1, seed=0)
    again = merge_report.report([merge.measure(cases[0])])
    for key in ("samples_ratio", "trained_over_unique", "false_forks", "corpus", "per_template"):
        assert out[key] == again[key]
    assert set(out["seconds"]) == {"generate", "total", *merge_report.BUILDERS}


def test_a_session_that_compacts_every_twenty_calls_is_five_chains_all_trained(tokenizer):
    """`polar bench merge --turns 100 --compact-every 20`: four compactions, five chains; every chain trains every
    sampled token, the primary chain alone about a fifth of them."""
    (case,) = merge_corpus.generate(1, 0, tokenizer, turns=100, compact_every=20)
    assert (case.turns, case.compactions, case.subagents, case.real_chains) == (100, 4, 0, 5)
    out = merge_report.report([merge.measure(case)])
    tree = out["builders"]["prefix_tree"]
    assert tree["roots"] == 5 and tree["drift"] == {"compaction": 4}
    assert out["trained_share_every_chain"] == 1.0
    assert 0.1 < out["trained_share_primary"] < 0.35
