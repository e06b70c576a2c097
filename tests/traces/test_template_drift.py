"""Golden tests: realistic sessions, rendered with real chat templates, through the trace builders.

The sessions come from `sessions.py` (a harness played against a pretend model, the real Qwen
tokenizer, our Qwen-style templates). The first group checks the fixtures themselves, so that a
failing builder test means the builder is wrong, not the fixture. The second group checks what
`build` makes of them: exact traces, drift causes and repairs, and the training invariant.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from .sessions import (
    CLAUDE_CODE_SUMMARY,
    Assistant,
    Compact,
    Conversation,
    Harness,
    ToolCall,
    ToolResult,
    User,
    compact_sorted,
    expected_chain,
    failed_record,
    first_difference,
    function_tool,
    interleave,
    load_template,
    to_records,
)

TOOLS = [
    function_tool("bash", "Run a shell command in the workspace.", command="string", timeout="integer"),
    function_tool("read_file", "Read a file from the workspace.", path="string", limit="integer"),
    function_tool("edit_file", "Replace text in a file.", path="string", old="string", new="string"),
]
SUBAGENT_TOOL = function_tool("Task", "Launch a sub-agent for a self-contained search task.", prompt="string")
MAIN_SYSTEM = "You are a coding agent. Work in the repository at /repo and keep answers short."
SUB_SYSTEM = "You are a file search specialist. Report paths and line numbers, nothing else."

TASK = User("Fix the failing test in tests/test_math.py.")
# a short bug fix: four model calls, tool calls with text, without text, and two in parallel
FIX_BUG = [
    TASK,
    Assistant(
        "I'll run the tests first to see what fails.",
        tool_calls=(ToolCall("bash", {"command": "pytest -q tests/test_math.py", "timeout": 120}),),
    ),
    ToolResult("F.\n___ test_add ___\n    assert add(2, 2) == 4\nE   assert 5 == 4\n1 failed, 1 passed in 0.03s"),
    Assistant(tool_calls=(ToolCall("read_file", {"path": "src/math_utils.py", "limit": 40}),)),
    ToolResult("def add(a, b):\n    return a + b + 1\n"),
    Assistant(
        "`add` adds an extra 1.",
        tool_calls=(
            ToolCall("edit_file", {"path": "src/math_utils.py", "old": "return a + b + 1", "new": "return a + b"}),
            ToolCall("bash", {"command": "pytest -q", "timeout": 120}),
        ),
    ),
    ToolResult("ok: 1 replacement"),
    ToolResult("2 passed in 0.02s"),
    Assistant("Fixed: `add` returned `a + b + 1`; it now returns `a + b` and both tests pass."),
]

# the same work, thinking on, and a second user query after the first answer
FIX_BUG_THINKING = [
    TASK,
    Assistant(
        reasoning="The user wants a failing test fixed. Running the tests shows which one.",
        tool_calls=(ToolCall("bash", {"command": "pytest -q tests/test_math.py", "timeout": 120}),),
    ),
    ToolResult("F.\n___ test_add ___\n    assert add(2, 2) == 4\nE   assert 5 == 4\n1 failed, 1 passed in 0.03s"),
    Assistant(
        "The fix is to drop the `+ 1` in `add`.",
        reasoning="add(2, 2) gives 5, so the function adds one too many.",
        tool_calls=(
            ToolCall("edit_file", {"path": "src/math_utils.py", "old": "return a + b + 1", "new": "return a + b"}),
        ),
    ),
    ToolResult("ok: 1 replacement"),
    Assistant("Done: `add` no longer adds 1.", reasoning="The edit went through; the answer can be short."),
    User("Also add a test for negative numbers."),
    Assistant(
        reasoning="A new test case in tests/test_math.py, then run it.",
        tool_calls=(
            ToolCall(
                "edit_file",
                {"path": "tests/test_math.py", "old": "", "new": "def test_neg():\n    assert add(-1, -2) == -3\n"},
            ),
        ),
    ),
    ToolResult("ok: 1 replacement"),
    Assistant("Added `test_neg`.", reasoning="Done; no need to run anything else."),
]


def qwen25(**habits) -> Harness:
    return Harness(system=MAIN_SYSTEM, tools=TOOLS, **habits)


def play(tokenizer, template: str, steps, harness: Harness | None = None, **kw):
    conv = Conversation(tokenizer, load_template(template), harness or qwen25(), **kw)
    return conv.run(steps)


def text(tokenizer, ids) -> str:
    return tokenizer.decode(ids, skip_special_tokens=False)


@pytest.fixture(scope="module")
def build():
    # imported here so that the fixture tests run while the builder is being written
    from nemo_polar.traces import build

    return build


# --- fixture checks (no builder needed) -----------------------------------------------------------


def test_qwen25_template_renders_chatml_exactly(tokenizer):
    steps = [User("hi"), Assistant("hello"), User("bye"), Assistant("see you")]
    calls = play(tokenizer, "qwen25", steps, Harness(system="S"))
    assert calls[1].prompt_text == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
        "<|im_start|>assistant\nhello<|im_end|>\n<|im_start|>user\nbye<|im_end|>\n<|im_start|>assistant\n"
    )
    assert calls[0].completion_text == "hello<|im_end|>"


def test_tool_turns_render_as_hermes_blocks(tokenizer):
    calls = play(tokenizer, "qwen25", FIX_BUG)
    assert len(calls) == 4
    assert calls[0].prompt_text.startswith(f"<|im_start|>system\n{MAIN_SYSTEM}\n\n# Tools\n\n")
    assert '\n{"type": "function", "function": {"name": "read_file", ' in calls[0].prompt_text
    assert calls[1].prompt_text.endswith(
        "<|im_start|>assistant\nI'll run the tests first to see what fails.\n<tool_call>\n"
        '{"name": "bash", "arguments": {"command": "pytest -q tests/test_math.py", "timeout": 120}}\n'
        "</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nF.\n___ test_add ___\n"
        "    assert add(2, 2) == 4\nE   assert 5 == 4\n1 failed, 1 passed in 0.03s\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    # two results of two parallel calls share one user turn
    assert "</tool_response>\n<tool_response>\n2 passed" in calls[3].prompt_text
    for c in calls:
        assert text(tokenizer, c.prompt_ids) == c.prompt_text
        assert text(tokenizer, c.completion_ids) == c.completion_text
    assert [c.finish_reason for c in calls] == ["tool_calls", "tool_calls", "tool_calls", "stop"]
    assert calls[2].message["tool_calls"][0]["arguments"] == (
        '{"path": "src/math_utils.py", "old": "return a + b + 1", "new": "return a + b"}'
    )


def test_our_templates_agree_with_the_vendor_template(tokenizer, vendor_template):
    """The tokenizer ships Qwen3's template; ours must render the same text where they overlap."""
    cases = [
        ("qwen25", FIX_BUG, {}),  # with a system prompt and no reasoning, Qwen3's layout is Qwen2.5's
        ("qwen3_empty_think", FIX_BUG, {"enable_thinking": False}),
        ("qwen3_strip_reasoning", FIX_BUG_THINKING, {}),
    ]
    for template, steps, kwargs in cases:
        for c in play(tokenizer, template, steps):
            vendor = tokenizer.apply_chat_template(
                c.messages,
                tools=TOOLS,
                chat_template=vendor_template,
                add_generation_prompt=True,
                tokenize=False,
                **kwargs,
            )
            assert c.prompt_text == vendor, (template, c.index)


def test_qwen25_session_is_one_clean_chain(tokenizer, eot_id):
    calls = play(tokenizer, "qwen25", FIX_BUG)
    for prev, c in zip(calls, calls[1:], strict=False):
        assert c.prompt_ids[: len(prev.prompt_ids) + len(prev.completion_ids)] == prev.prompt_ids + prev.completion_ids
    chain = expected_chain(calls, eot_id)
    assert chain.prompt_ids + chain.response_ids == calls[-1].prompt_ids + calls[-1].completion_ids
    assert sum(chain.loss_mask) == sum(len(c.completion_ids) for c in calls)


def test_empty_think_block_is_in_the_generation_prompt_only(tokenizer):
    think = tokenizer.encode("<think>\n\n</think>\n\n", add_special_tokens=False)
    assert think == [151667, 271, 151668, 271]
    calls = play(tokenizer, "qwen3_empty_think", FIX_BUG)
    for prev, c in zip(calls, calls[1:], strict=False):
        assert prev.prompt_ids[-4:] == think
        assert c.prompt_ids.count(think[0]) == 1  # history turns come back without it
        assert first_difference(c.prompt_ids, prev.prompt_ids + prev.completion_ids) == len(prev.prompt_ids) - 4
        assert c.prompt_ids[: len(prev.prompt_ids) - 4] == prev.prompt_ids[:-4]
        assert c.prompt_ids[len(prev.prompt_ids) - 4 :][: len(prev.completion_ids)] == prev.completion_ids


def test_reasoning_is_stripped_once_a_new_query_arrives(tokenizer):
    calls = play(tokenizer, "qwen3_strip_reasoning", FIX_BUG_THINKING)
    assert len(calls) == 5
    first, second, third = FIX_BUG_THINKING[1].reasoning, FIX_BUG_THINKING[3].reasoning, FIX_BUG_THINKING[7].reasoning
    assert calls[0].completion_text.startswith(f"<think>\n{first}\n</think>\n\n<tool_call>")
    assert first in calls[1].prompt_text and first in calls[2].prompt_text
    assert first not in calls[3].prompt_text and second not in calls[3].prompt_text
    assert third in calls[4].prompt_text
    # call 3 leaves the chain at the first sampled token of call 0; call 4 extends call 3 again
    p, c = calls[2], calls[3]
    assert first_difference(c.prompt_ids, p.prompt_ids + p.completion_ids) == len(calls[0].prompt_ids)
    nxt = calls[4]
    assert nxt.prompt_ids[: len(c.prompt_ids) + len(c.completion_ids)] == c.prompt_ids + c.completion_ids


def test_reserialised_arguments_change_the_sampled_turn(tokenizer):
    calls = play(tokenizer, "qwen25", FIX_BUG, qwen25(reserialise_args=compact_sorted))
    assert '{"name": "read_file", "arguments": {"path": "src/math_utils.py", "limit": 40}}' in calls[1].completion_text
    assert '{"name": "read_file", "arguments": {"limit":40,"path":"src/math_utils.py"}}' in calls[2].prompt_text
    for prev, c in zip(calls, calls[1:], strict=False):
        pos = first_difference(c.prompt_ids, prev.prompt_ids + prev.completion_ids)
        assert len(prev.prompt_ids) < pos < len(prev.prompt_ids) + len(prev.completion_ids)


def test_header_line_changes_every_call(tokenizer):
    calls = play(tokenizer, "qwen25", FIX_BUG, qwen25(header_line=True))
    heads = [c.prompt_text.split("\n")[1] for c in calls]
    assert all(h.startswith("x-anthropic-billing-header: cc_version=1.0; cch=") for h in heads)
    assert len(set(heads)) == len(calls)
    system_end = calls[0].prompt_ids.index(151645)
    for prev, c in zip(calls, calls[1:], strict=False):
        assert 3 < first_difference(c.prompt_ids, prev.prompt_ids + prev.completion_ids) < system_end


def test_truncated_turn_is_closed_by_the_next_prompt(tokenizer, eot_id):
    calls = play(tokenizer, "qwen25", TRUNCATED, Harness(system=MAIN_SYSTEM))
    cut, nxt = calls
    assert cut.finish_reason == "length" and eot_id not in cut.completion_ids
    assert len(cut.completion_ids) == 12
    assert nxt.prompt_ids[: len(cut.prompt_ids) + 12] == cut.prompt_ids + cut.completion_ids
    assert nxt.prompt_ids[len(cut.prompt_ids) + 12] == eot_id
    assert cut.message["content"] == cut.completion_text


def test_records_carry_what_the_proxy_records(tokenizer):
    calls = play(tokenizer, "qwen25", FIX_BUG)
    records = to_records(calls, "s-fix")
    assert [r.seq for r in records] == [0, 1, 2, 3]
    assert len({r.id for r in records}) == 4
    assert all(r.trainable and r.status == "ok" and r.session_id == "s-fix" for r in records)
    for r, c in zip(records, calls, strict=True):
        assert r.prompt_token_ids == c.prompt_ids and r.completion_token_ids == c.completion_ids
        assert all(lp < 0 for lp in r.completion_logprobs)
        assert r.message["content"] == c.message["content"]
    # logprobs differ between calls, so a span attributed to the wrong record is caught
    assert records[0].completion_logprobs[:5] != records[1].completion_logprobs[:5]


# --- scenarios shared by the builder tests --------------------------------------------------------

TRUNCATED = [
    User("Explain in two sentences why Rust has no garbage collector."),
    Assistant(
        "Rust frees memory when its owner goes out of scope, so it does not need a collector. "
        "The borrow checker proves at compile time that no reference outlives its data.",
        truncate_at=12,
    ),
    User("continue"),
    Assistant("The borrow checker proves at compile time that no reference outlives its data."),
]
COMPACTION = [
    *FIX_BUG,
    User("Your task is to create a detailed summary of the conversation so far."),
    Assistant("Summary: the user asked to fix tests/test_math.py; `add` had an off-by-one; it is fixed."),
    Compact(
        CLAUDE_CODE_SUMMARY
        + "Summary: the user asked to fix tests/test_math.py; `add` had an off-by-one; it is fixed.\n"
        + "Continue with the last task."
    ),
    Assistant(tool_calls=(ToolCall("bash", {"command": "pytest -q", "timeout": 120}),)),
    ToolResult("2 passed in 0.02s"),
    Assistant("All tests pass."),
]
MAIN_WITH_SUBAGENT = [
    User("Where is the retry policy configured, and is its default sane?"),
    Assistant(
        "I'll have a sub-agent find it.",
        tool_calls=(ToolCall("Task", {"prompt": "Find where the retry policy and its default are defined."}),),
    ),
    ToolResult("nemo_polar/config.py:88 retries: int = 3"),
    Assistant(tool_calls=(ToolCall("read_file", {"path": "nemo_polar/config.py", "limit": 20}),)),
    ToolResult("retries: int = 3  # per upstream call"),
    Assistant("It is `ProxyConfig.retries` in nemo_polar/config.py:88; the default of 3 is sane."),
]
SUBAGENT = [
    User("Find where the retry policy and its default are defined."),
    Assistant(tool_calls=(ToolCall("bash", {"command": "grep -rn retries nemo_polar", "timeout": 30}),)),
    ToolResult("nemo_polar/config.py:88:    retries: int = 3"),
    Assistant(tool_calls=(ToolCall("read_file", {"path": "nemo_polar/config.py", "limit": 5}),)),
    ToolResult("    retries: int = 3"),
    Assistant("nemo_polar/config.py:88 retries: int = 3"),
]


# --- checks every builder result must pass ------------------------------------------------------


def check_invariants(result, records) -> None:
    """Mask 1 holds the sampled token and logprob of the segment's record; each sample trained once."""
    by_id = {r.id: r for r in records}
    trained: Counter[str] = Counter()
    for t in result.traces:
        n = len(t.response_ids)
        assert len(t.loss_mask) == n == len(t.response_logprobs)
        covered = [False] * n
        for s in t.segments:
            rec = by_id[s.record_id]
            assert 0 <= s.start <= s.end <= n, s
            span = t.response_ids[s.start : s.end]
            assert span == rec.completion_token_ids[: len(span)], f"segment {s} is not what {rec.id} sampled"
            for i in range(s.start, s.end):
                assert not covered[i], f"segments overlap at {i}"
                covered[i] = True
                if s.trained:
                    assert t.loss_mask[i] == 1
                    assert t.response_logprobs[i] == rec.completion_logprobs[i - s.start]
            if s.trained:
                trained[s.record_id] += len(span)
        for i in range(n):
            if not (covered[i] and t.loss_mask[i]):
                assert t.loss_mask[i] == 0, f"mask 1 at {i} outside a trained segment"
                assert t.response_logprobs[i] == 0.0
        check_chain(t, by_id)
    for r in records:
        if r.trainable:
            assert trained[r.id] == len(r.completion_token_ids), f"{r.id} trained {trained[r.id]} tokens"
    assert result.stats.trained_tokens == sum(trained.values()) == sum(t.trained_tokens for t in result.traces)


def check_chain(t, by_id) -> None:
    """Each call's span follows its own prompt: all of it when nothing was repaired, else its tail."""
    segs = sorted(t.segments, key=lambda s: s.start)
    first = by_id[segs[0].record_id]
    assert t.prompt_ids + t.response_ids[: segs[0].start] == first.prompt_token_ids
    for prev, s in zip(segs, segs[1:], strict=False):
        prompt = by_id[s.record_id].prompt_token_ids
        if not t.metadata.get("repairs"):
            assert t.prompt_ids + t.response_ids[: s.start] == prompt, f"{s.record_id} is not on this path"
        else:
            gap = t.response_ids[prev.end : s.start]
            assert gap and prompt[-len(gap) :] == gap, f"the glue before {s.record_id} is not its prompt's tail"


def assert_trace_is(trace, chain) -> None:
    assert trace.prompt_ids == chain.prompt_ids
    assert trace.response_ids == chain.response_ids
    assert trace.loss_mask == chain.loss_mask
    assert trace.response_logprobs == chain.logprobs
    got = [(s.record_id, s.start, s.end) for s in sorted(trace.segments, key=lambda s: s.start)]
    assert got == chain.spans
    assert trace.record_ids == [rid for rid, _, _ in chain.spans]


def trace_starting_with(result, record_id: str):
    found = [t for t in result.traces if min(t.segments, key=lambda s: s.start).record_id == record_id]
    assert len(found) == 1, f"{len(found)} traces start with {record_id}"
    return found[0]


def repairs(trace) -> list[tuple[str, str]]:
    out = []
    for r in trace.metadata.get("repairs", []):
        r = r if isinstance(r, dict) else r.model_dump()
        out.append((r["record_id"], r["cause"]))
    return out


def assert_events(result, calls, cause: str, *, repaired: bool) -> None:
    """One event per call after the first, against the call just before it."""
    got = sorted((e.record_id, e.parent_id, e.position, e.cause, e.repaired) for e in result.drift_events)
    want = sorted(
        (c.id, p.id, first_difference(c.prompt_ids, p.prompt_ids + p.completion_ids), cause, repaired)
        for p, c in zip(calls, calls[1:], strict=False)
    )
    assert got == want


# --- 1. a clean chain -----------------------------------------------------------------------------


def test_linear_chain_is_one_trace(tokenizer, eot_id, build):
    calls = play(tokenizer, "qwen25", FIX_BUG)
    records = to_records(calls)
    r = build(records, "prefix_tree", tokenizer=tokenizer)
    check_invariants(r, records)
    assert len(r.traces) == 1
    t = r.traces[0]
    assert_trace_is(t, expected_chain(calls, eot_id))
    assert all(s.trained for s in t.segments)
    last = calls[-1]
    assert text(tokenizer, t.prompt_ids + t.response_ids) == last.prompt_text + last.completion_text
    assert r.drift_events == [] and r.stats.drift == {} and r.stats.repaired == {}
    assert not t.metadata.get("repairs")
    s = r.stats
    assert (s.records, s.trainable, s.traces, s.roots, s.merged) == (4, 4, 1, 1, 3)
    assert s.trained_tokens == sum(len(c.completion_ids) for c in calls)
    assert s.trace_tokens == len(t.prompt_ids) + len(t.response_ids) == s.unique_tokens


def test_per_request_is_one_trace_per_call(tokenizer, build):
    calls = play(tokenizer, "qwen25", FIX_BUG)
    records = to_records(calls)
    r = build(records, "per_request")
    check_invariants(r, records)
    assert [t.record_ids for t in r.traces] == [[c.id] for c in calls]
    for t, c in zip(r.traces, calls, strict=True):
        assert (t.prompt_ids, t.response_ids, t.response_logprobs) == (c.prompt_ids, c.completion_ids, c.logprobs)
        assert t.loss_mask == [1] * len(c.completion_ids)
    assert r.stats.trace_tokens == sum(len(c.prompt_ids) + len(c.completion_ids) for c in calls)


def test_failed_records_are_skipped(tokenizer, eot_id, build):
    calls = play(tokenizer, "qwen25", FIX_BUG)
    records = to_records(calls)
    with_failure = [*records[:2], failed_record("s1", 99), *records[2:]]
    r = build(with_failure, "prefix_tree", tokenizer=tokenizer)
    check_invariants(r, records)
    assert r.stats.skipped == {"upstream_error": 1}
    assert (r.stats.records, r.stats.trainable) == (5, 4)
    assert_trace_is(r.traces[0], expected_chain(calls, eot_id))


def test_missing_logprobs_name_the_record(tokenizer, build):
    from nemo_polar.errors import TraceBuildError

    records = to_records(play(tokenizer, "qwen25", FIX_BUG))
    broken = records[2].model_copy(update={"completion_logprobs": records[2].completion_logprobs[:-1]})
    with pytest.raises(TraceBuildError, match=records[2].id):
        build([*records[:2], broken, records[3]], "prefix_tree", tokenizer=tokenizer)


# --- 2. Qwen3 with thinking off: the empty think block ------------------------------------------


def test_empty_think_block_forks_every_call_without_repair(tokenizer, build):
    calls = play(tokenizer, "qwen3_empty_think", FIX_BUG)
    records = to_records(calls)
    r = build(records, "prefix_tree", tokenizer=tokenizer, repair=False)
    check_invariants(r, records)
    assert r.stats.drift == {"think_block_inserted": 3} and r.stats.repaired == {}
    assert_events(r, calls, "think_block_inserted", repaired=False)
    assert len(r.traces) == 4
    for c in calls:
        t = trace_starting_with(r, c.id)
        assert (t.prompt_ids, t.response_ids) == (c.prompt_ids, c.completion_ids)


def test_empty_think_block_is_repaired_into_one_chain(tokenizer, eot_id, build):
    calls = play(tokenizer, "qwen3_empty_think", FIX_BUG)
    records = to_records(calls)
    r = build(records, "prefix_tree", tokenizer=tokenizer)
    check_invariants(r, records)
    assert r.stats.drift == {"think_block_inserted": 3}
    assert r.stats.repaired == {"think_block_inserted": 3}
    assert_events(r, calls, "think_block_inserted", repaired=True)
    assert len(r.traces) == 1
    t = r.traces[0]
    assert_trace_is(t, expected_chain(calls, eot_id))
    assert [tok for tok, m in zip(t.response_ids, t.loss_mask, strict=True) if m] == [
        tok for c in calls for tok in c.completion_ids
    ]
    assert repairs(t) == [(c.id, "think_block_inserted") for c in calls[1:]]


# --- 3. Qwen3 with thinking on: reasoning stripped after a new query ----------------------------


def test_stripped_reasoning_is_detected_and_repaired(tokenizer, eot_id, build):
    calls = play(tokenizer, "qwen3_strip_reasoning", FIX_BUG_THINKING)
    records = to_records(calls)
    r = build(records, "prefix_tree", tokenizer=tokenizer)
    check_invariants(r, records)
    assert r.stats.drift == {"reasoning_removed": 1} and r.stats.repaired == {"reasoning_removed": 1}
    [event] = r.drift_events
    assert (event.record_id, event.parent_id, event.cause, event.repaired) == (
        calls[3].id,
        calls[2].id,
        "reasoning_removed",
        True,
    )
    assert event.position == len(calls[0].prompt_ids)  # the first sampled token of call 0: its <think>
    assert len(r.traces) == 1
    assert_trace_is(r.traces[0], expected_chain(calls, eot_id))
    assert repairs(r.traces[0]) == [(calls[3].id, "reasoning_removed")]


def test_stripped_reasoning_forks_without_repair(tokenizer, eot_id, build):
    calls = play(tokenizer, "qwen3_strip_reasoning", FIX_BUG_THINKING)
    records = to_records(calls)
    r = build(records, "prefix_tree", tokenizer=tokenizer, repair=False)
    check_invariants(r, records)
    assert r.stats.drift == {"reasoning_removed": 1} and r.stats.repaired == {}
    assert len(r.traces) == 2
    assert_trace_is(trace_starting_with(r, calls[0].id), expected_chain(calls[:3], eot_id))
    assert_trace_is(trace_starting_with(r, calls[3].id), expected_chain(calls[3:], eot_id))


# --- 4. tool arguments re-serialised by the harness ---------------------------------------------


def test_reserialised_tool_arguments_are_repaired(tokenizer, eot_id, build):
    calls = play(tokenizer, "qwen25", FIX_BUG, qwen25(reserialise_args=compact_sorted))
    records = to_records(calls)
    r = build(records, "prefix_tree", tokenizer=tokenizer)
    check_invariants(r, records)
    assert r.stats.drift == {"tool_args_reserialised": 3}
    assert r.stats.repaired == {"tool_args_reserialised": 3}
    assert_events(r, calls, "tool_args_reserialised", repaired=True)
    assert len(r.traces) == 1
    assert_trace_is(r.traces[0], expected_chain(calls, eot_id))


def test_reserialised_tool_arguments_without_repair_still_train_each_token_once(tokenizer, build):
    calls = play(tokenizer, "qwen25", FIX_BUG, qwen25(reserialise_args=compact_sorted))
    records = to_records(calls)
    r = build(records, "prefix_tree", tokenizer=tokenizer, repair=False)
    check_invariants(r, records)
    assert r.stats.drift == {"tool_args_reserialised": 3} and r.stats.repaired == {}
    assert len(r.traces) == 4


# --- 5. a per-request header line in the system prompt -------------------------------------------


def test_header_line_is_repaired(tokenizer, eot_id, build):
    calls = play(tokenizer, "qwen25", FIX_BUG, qwen25(header_line=True))
    records = to_records(calls)
    r = build(records, "prefix_tree", tokenizer=tokenizer)
    check_invariants(r, records)
    assert r.stats.drift == {"header_line": 3} and r.stats.repaired == {"header_line": 3}
    assert_events(r, calls, "header_line", repaired=True)
    assert len(r.traces) == 1
    assert_trace_is(r.traces[0], expected_chain(calls, eot_id))  # the first call's header stays


def test_header_line_without_repair_is_per_request(tokenizer, build):
    calls = play(tokenizer, "qwen25", FIX_BUG, qwen25(header_line=True))
    records = to_records(calls)
    r = build(records, "prefix_tree", tokenizer=tokenizer, repair=False)
    check_invariants(r, records)
    assert r.stats.drift == {"header_line": 3}
    assert len(r.traces) == 4
    for c in calls:
        t = trace_starting_with(r, c.id)
        assert (t.prompt_ids, t.response_ids) == (c.prompt_ids, c.completion_ids)


# --- 6. compaction ---------------------------------------------------------------------------------


def test_compaction_forks_a_second_trace(tokenizer, eot_id, build):
    calls = play(tokenizer, "qwen25", COMPACTION)
    assert len(calls) == 7
    before, after = calls[:5], calls[5:]
    records = to_records(calls)
    r = build(records, "prefix_tree", tokenizer=tokenizer)
    check_invariants(r, records)
    assert r.stats.drift == {"compaction": 1} and r.stats.repaired == {}
    [event] = r.drift_events
    assert (event.record_id, event.cause, event.repaired) == (after[0].id, "compaction", False)
    assert event.parent_id in {c.id for c in before}
    assert event.position == first_difference(after[0].prompt_ids, before[0].prompt_ids)
    assert len(r.traces) == 2
    assert_trace_is(trace_starting_with(r, before[0].id), expected_chain(before, eot_id))
    assert_trace_is(trace_starting_with(r, after[0].id), expected_chain(after, eot_id))
    assert r.stats.trained_tokens == sum(len(c.completion_ids) for c in calls)


# --- 7. a sub-agent interleaved with the main agent -----------------------------------------------


def _subagent_session(tokenizer, order):
    main = play(tokenizer, "qwen25", MAIN_WITH_SUBAGENT, Harness(system=MAIN_SYSTEM, tools=[SUBAGENT_TOOL, *TOOLS]))
    sub = play(tokenizer, "qwen25", SUBAGENT, Harness(system=SUB_SYSTEM, tools=TOOLS), agent="sub")
    return main, sub, interleave({"main": main, "sub": sub}, order)


def test_interleaved_subagent_gives_two_traces_in_any_order(tokenizer, build):
    main, sub, records = _subagent_session(tokenizer, ["main", "sub", "sub", "main", "sub", "main"])
    assert [r.seq for r in records] == list(range(6))
    r = build(records, "prefix_tree", tokenizer=tokenizer)
    check_invariants(r, records)
    assert len(r.traces) == 2
    assert {tuple(t.record_ids) for t in r.traces} == {tuple(c.id for c in main), tuple(c.id for c in sub)}
    assert set(r.stats.drift) <= {"system_prompt"} and r.stats.repaired == {}
    for seed in range(5):
        shuffled = list(records)
        random.Random(seed).shuffle(shuffled)
        assert build(shuffled, "prefix_tree", tokenizer=tokenizer).model_dump() == r.model_dump()
    # another arrival order (seq and times follow it): the same traces
    _, _, other = _subagent_session(tokenizer, ["main", "main", "sub", "sub", "main", "sub"])
    again = build(other, "prefix_tree", tokenizer=tokenizer)
    check_invariants(again, other)
    assert [_without_seq(t) for t in again.traces] == [_without_seq(t) for t in r.traces]


def _without_seq(trace) -> dict:
    """A trace's content; metadata["seq"] records arrival order, which legitimately differs."""
    d = trace.model_dump()
    d["metadata"] = {k: v for k, v in d["metadata"].items() if k != "seq"}
    return d


# --- 8. a length-truncated turn -------------------------------------------------------------------


@pytest.mark.parametrize("hint", ["tokenizer", "eot_token_id"])
def test_truncated_turn_is_closed_with_an_untrained_eot(tokenizer, eot_id, build, hint):
    calls = play(tokenizer, "qwen25", TRUNCATED, Harness(system=MAIN_SYSTEM))
    records = to_records(calls)
    kw = {"tokenizer": tokenizer} if hint == "tokenizer" else {"eot_token_id": eot_id}
    r = build(records, "prefix_tree", **kw)
    check_invariants(r, records)
    assert r.drift_events == [] and len(r.traces) == 1
    t = r.traces[0]
    assert_trace_is(t, expected_chain(calls, eot_id))
    end = t.segments[0].end
    assert end == len(calls[0].completion_ids) == 12
    assert (t.response_ids[end], t.loss_mask[end], t.response_logprobs[end]) == (eot_id, 0, 0.0)
