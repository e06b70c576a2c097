"""The builder's tree as the page gets it: parents from the traces' chains, forks, roots, drift, calls left out."""

from __future__ import annotations

from nemo_polar.records import CompletionRecord, UpstreamInfo
from nemo_polar.traces import build
from nemo_polar.view.tree import chain_tree

UP = UpstreamInfo(engine="vllm", url="http://u", model="m")
EOT = 2


def rec(seq: int, prompt: list[int], sample: list[int], status: str = "ok") -> CompletionRecord:
    return CompletionRecord(
        id=f"c{seq}",
        session_id="s",
        seq=seq,
        started_at=float(seq),
        finished_at=seq + 0.5,
        dialect="openai_chat",
        stream=False,
        native_request={},
        prompt_token_ids=prompt,
        completion_token_ids=sample,
        completion_logprobs=[-0.5] * len(sample),
        finish_reason="stop",
        upstream=UP,
        status=status,
    )


def test_a_fork_a_new_root_and_a_failed_call():
    records = [
        rec(0, [1, 3, 4], [10, EOT]),
        rec(1, [1, 3, 4, 10, EOT, 5, 6], [11, EOT]),
        rec(2, [1, 3, 4, 10, EOT, 5, 6, 11, EOT, 7], [12, EOT]),  # continues #1
        rec(3, [1, 3, 4, 10, EOT, 5, 6, 11, EOT, 8], [13, EOT]),  # also continues #1: a fork
        rec(4, [50, 51, 52], [14, EOT]),  # shares nothing: a chain of its own
        rec(5, [], [], status="upstream_error"),
    ]
    built = build(records)
    tree = chain_tree(records, built)
    assert tree["chains"] == len(built.traces) == 3
    assert tree["roots"] == ["c0", "c4"] and tree["forks"] == 1
    nodes = {n["id"]: n for n in tree["nodes"]}
    assert nodes["c1"]["children"] == ["c2", "c3"] and nodes["c2"]["parent"] == nodes["c3"]["parent"] == "c1"
    leaves = sorted(n["trace"] for n in tree["nodes"] if not n["children"])
    assert leaves == [0, 1, 2]  # one leaf per trace
    assert nodes["c1"]["trained_in"] == 0 and nodes["c3"]["trained_in"] == nodes["c3"]["trace"]  # trained once
    assert [n["role"] for n in tree["nodes"]] == ["start", "continues", "continues", "continues", "start"]
    assert tree["outside"] == [{"id": "c5", "seq": 5, "status": "upstream_error", "why": "upstream_error"}]


def test_drift_is_labelled_with_its_cause_and_whether_it_was_repaired():
    first = rec(0, [1, 3, EOT, 4, 5, 6, EOT, 7], [20, 21, EOT])
    # the next prompt re-renders the sampled turn differently: a template quirk, repaired onto the raw sample
    retok = rec(1, [1, 3, EOT, 4, 5, 6, EOT, 7, 20, 29, EOT, 8], [22, EOT])
    # an earlier turn rewritten: a compaction, a chain of its own
    compacted = rec(2, [1, 3, EOT, 4, 9, 6, EOT, 7, 20, 21, EOT, 8], [23, EOT])
    # the first turn differs: another system prompt, a sub-agent
    sub = rec(3, [1, 30, 31, EOT, 7, 8], [24, EOT])
    records = [first, retok, compacted, sub]
    tree = chain_tree(records, build(records))
    nodes = {n["id"]: n for n in tree["nodes"]}
    assert nodes["c1"]["role"] == "repaired" and nodes["c1"]["parent"] == "c0"
    assert nodes["c1"]["drift"] == {
        "cause": "retokenization",
        "repaired": True,
        "from_id": "c0",
        "from_seq": 0,
        "position": 9,
        "detail": nodes["c1"]["drift"]["detail"],
    }
    assert nodes["c2"]["role"] == "compaction" and nodes["c2"]["parent"] is None
    assert nodes["c2"]["drift"]["cause"] == "compaction" and not nodes["c2"]["drift"]["repaired"]
    assert nodes["c3"]["role"] == "sub-agent" and nodes["c3"]["drift"]["cause"] == "system_prompt"
    assert tree["chains"] == 3 and tree["roots"] == ["c0", "c2", "c3"]


def test_a_call_above_a_fork_is_in_each_trace_below_it():
    records = [
        rec(0, [1, 3, 4], [10, EOT]),
        rec(1, [1, 3, 4, 10, EOT, 5], [11, EOT]),
        rec(2, [1, 3, 4, 10, EOT, 6], [12, EOT]),
    ]
    nodes = chain_tree(records, build(records))["nodes"]
    assert [n["in_traces"] for n in nodes] == [2, 1, 1] and nodes[0]["trained_in"] == 0


def test_a_side_call_is_named_on_the_tree_and_in_the_traces():
    """opencode's title call, first of its session: the page names it as the harness does (SessionView)."""
    from nemo_polar.view.session import SessionView

    title = rec(0, [60, 61], [15, EOT]).model_copy(
        update={"native_request": {"messages": [{"role": "system", "content": "You are a title generator."}]}}
    )
    records = [title, rec(1, [1, 3, 4], [10, EOT]), rec(2, [1, 3, 4, 10, EOT, 5], [11, EOT])]
    detail = SessionView.of({"harness": "opencode", "builder": "prefix_tree"}, records).detail()
    nodes = {n["id"]: n for n in detail["tree"]["nodes"]}
    assert nodes["c0"]["side_call"] == "title" and nodes["c1"]["side_call"] is None
    assert [t["side_call"] for t in detail["traces"]] == ["title", None]
    other = SessionView.of({"harness": "codex", "builder": "prefix_tree"}, records).detail()  # names none
    assert [t["side_call"] for t in other["traces"]] == [None, None]
