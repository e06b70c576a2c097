"""Kilo Code (`kilo run`, a fork of opencode), the real CLI in a bubblewrap sandbox, through the real proxy.

The upstream is the fake server: the task asks it for a tool call (`[fault:tool_call]`), which names Kilo's first
tool, `background_process`, with arguments it rejects; Kilo sends the rejection back to the model and, after three
such calls in a row, stops the turn and exits 1. Three calls, every one the agent's own (`kilo run` makes no title
call): its system prompt and tools, the instruction word for word (on stdin), each call's history an exact prefix
of the next (nothing compacted or pruned), and nothing fetched or installed from the network.
"""

from __future__ import annotations

import pytest

from nemo_polar.bench.fake_upstream import SERVED_MODEL, FakeUpstreamThread
from nemo_polar.harnesses import HARNESSES
from tests.conftest import make_proxy
from tests.harness_calls import capture_requested, save_calls

from .conftest import run_harness

pytestmark = pytest.mark.harness

# leading dashes, a double space, quotes and a number: on stdin, not parsed as arguments
TASK = '--help  "all" 42 of the files here -- list them [fault:tool_call]'


def run_kilo(proxy, tmp_path, **route):
    harness = HARNESSES.make("kilocode", {"max_tokens": 321, "context": 16384})
    run = run_harness(proxy, harness, tmp_path, TASK, 5, 90, sandbox=True, model=SERVED_MODEL, **route)
    return run.returncode, run.stdout, run.stderr, run.home, run.records


def test_tool_turns_keep_one_growing_history_of_the_agents_own_calls(tmp_path):
    with FakeUpstreamThread() as up, make_proxy(up.url, tmp_path) as proxy:
        rc, out, err, home, records = run_kilo(proxy, tmp_path)
    assert rc == 1 and "3 consecutive invalid-argument failures" in err, (out[-2000:], err[-2000:])
    assert [r.status for r in records] == ["ok"] * 3, [r.error for r in records]
    bodies = [r.native_request for r in records]
    for r, body in zip(records, bodies, strict=True):
        assert r.dialect == "openai_chat" and r.stream is True and body["model"] == SERVED_MODEL
        assert body["max_tokens"] == 321
        assert body["messages"][0]["role"] == "system" and body["messages"][0]["content"].startswith("You are Kilo")
        assert {t["function"]["name"] for t in body["tools"]} >= {"bash", "read", "edit", "write"}
        assert HARNESSES["kilocode"].side_call(body) is None and r.prompt_token_ids and r.completion_token_ids
    first = bodies[0]["messages"][1]
    assert first["role"] == "user" and first["content"][0] == {"type": "text", "text": TASK}  # as written
    for before, after in zip(bodies, bodies[1:], strict=False):  # history grows, never rewritten
        assert after["messages"][: len(before["messages"])] == before["messages"]
        assert len(after["messages"]) == len(before["messages"]) + 2
    call, result = bodies[1]["messages"][2:4]
    assert call["tool_calls"][0]["function"]["name"] == "background_process"
    assert result["role"] == "tool" and "invalid arguments" in result["content"]  # the tool refused the input
    # its session store and log in its own HOME; nothing installed (no npm cache, no plugin)
    assert ".local/share/kilo/kilo.db" in home and not any(p.startswith(".npm") for p in home)
    assert not any("node_modules" in p for p in home), [p for p in home if "node_modules" in p]
    if capture_requested("kilocode"):
        save_calls("kilocode", HARNESSES["kilocode"].pin.version, records)


def test_it_is_stopped_by_its_budget(tmp_path):
    """Its steps do not bound a tool loop: the proxy refuses the call past `max_calls` with a terminal 400."""
    with FakeUpstreamThread() as up, make_proxy(up.url, tmp_path) as proxy:
        rc, out, err, _, records = run_kilo(proxy, tmp_path, max_calls=2)
        spent = proxy.proxy.budget_spent(records[0].session_id)
    assert rc != 0 and len(records) == 2 and spent.startswith("session budget spent: 2 model calls"), (rc, err[-1500:])
