"""opencode, the real CLI in a bubblewrap sandbox, through the real proxy: what it sends over a tool turn.

The upstream is the fake server (a random model almost never calls a tool): the task asks it for a tool
call (`[fault:tool_call]`, so opencode runs `ls`), and the file `[fault:echo]` in the working copy, once
listed, makes the next answer plain text, which ends the run. Two calls, every one the agent's own: its
system prompt and tools, the instruction word for word, each call's history an exact prefix of the next
(nothing compacted or pruned, no title call beside them), and nothing fetched from the network (the
sandbox reaches only the proxy; the plugin install it would start is not attempted).
"""

from __future__ import annotations

import pytest

from nemo_polar.bench.fake_upstream import SERVED_MODEL, FakeUpstreamThread
from nemo_polar.harnesses import HARNESSES
from tests.conftest import make_proxy

from .conftest import run_harness

pytestmark = pytest.mark.harness

# leading dashes, a double space, quotes and a number: opencode gets words, not one argument, and must join them back
TASK = 'List the files  here: "all" 42 of them -- --help [fault:tool_call]'


def run_opencode(proxy, tmp_path, max_tokens: int, task: str = TASK, files=("[fault:echo]",), timeout=60, **options):
    harness = HARNESSES.make("opencode", {"max_tokens": max_tokens, "context": 16384} | options.pop("settings", {}))

    def prepare(work):
        for name in files:
            (work / name).write_text("")

    run = run_harness(
        proxy, harness, tmp_path, task, 5, timeout, sandbox=True, model=SERVED_MODEL, prepare=prepare, **options
    )
    return run.returncode, run.stdout, run.stderr, run.home, run.records


def test_a_tool_turn_keeps_one_growing_history_of_the_agents_own_calls(tmp_path):
    with FakeUpstreamThread() as up, make_proxy(up.url, tmp_path) as proxy:
        rc, out, err, home, records = run_opencode(proxy, tmp_path, max_tokens=321)
    assert rc == 0, (out[-2000:], err[-2000:])
    assert [r.status for r in records] == ["ok", "ok"], [r.error for r in records]
    first, second = (r.native_request for r in records)
    for body in (first, second):
        assert body["model"] == SERVED_MODEL and body["stream"] is True and body["max_tokens"] == 321
        assert body["messages"][0]["role"] == "system" and body["messages"][0]["content"].startswith(
            "You are opencode"
        )
        assert {t["function"]["name"] for t in body["tools"]} >= {"bash", "read", "edit", "write"}
    assert first["messages"][1] == {"role": "user", "content": TASK}  # the instruction exactly
    assert second["messages"][: len(first["messages"])] == first["messages"]  # history grows, never rewritten
    call, result = second["messages"][2:4]
    assert call["tool_calls"][0]["function"]["name"] == "bash" and call["content"] == ""
    assert result["role"] == "tool" and "[fault:echo]" in result["content"]  # `ls` ran in the working copy
    assert records[1].message == {"content": "-", "reasoning": None, "tool_calls": []}  # the echo: plain text
    # its session store and log in its own HOME; no npm cache, no plugin install
    assert ".local/share/opencode/opencode.db" in home and not any(p.startswith(".npm") for p in home)
    assert not any("node_modules/@opencode-ai" in p for p in home)


def test_with_its_title_call_on_a_tool_loop_is_stopped_by_its_budget(tmp_path):
    """Title call and auto-compaction on (opencode's own defaults) and a model that always calls a tool (every `ls`
    lists `[fault:tool_call]`): nothing but the session's budget ends it. The 13th call is refused with a terminal
    400 and opencode exits at once; its title call is named a side call and is never the chain trained."""
    from nemo_polar.env.gym import primary_chain
    from nemo_polar.traces import build

    settings = {"title": True, "compaction": True}
    with FakeUpstreamThread() as up, make_proxy(up.url, tmp_path) as proxy:
        rc, out, err, _, records = run_opencode(
            proxy, tmp_path, 64, "Look around. [fault:tool_call]", ("[fault:tool_call]",), 120, settings=settings,
            max_calls=12,
        )  # fmt: skip
        spent = proxy.proxy.budget_spent(records[0].session_id)
    assert rc != 0 and len(records) == 12 and spent.startswith("session budget spent: 12 model calls")
    systems = [r.native_request["messages"][0]["content"] for r in records]
    assert systems[0].startswith("You are a title generator") and all(
        s.startswith("You are opencode") for s in systems[1:]
    )
    built = build(records, "prefix_tree")
    HARNESSES["opencode"].name_side_calls(built.traces, {r.id: r.native_request for r in records})
    assert [t.metadata.get("side_call") for t in built.traces].count("title") == 1
    primary = built.traces[primary_chain(built.traces)]
    assert "side_call" not in primary.metadata and primary.record_ids[0] == records[1].id
