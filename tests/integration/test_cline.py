"""Cline, the real CLI (its native binary) in a bubblewrap sandbox, through the real proxy: what it sends.

The upstream is the fake server: the task asks it for a tool call (`[fault:tool_call]`), which names Cline's first
tool, `read_files`, with arguments it rejects; Cline sends the rejection back to the model and, after three such
mistakes in a row, ends the task (exit 0). Three calls, every one the agent's own: its system prompt and tools, the
instruction word for word, each call's history an exact prefix of the next (compaction off), no call beside them, and
no hub daemon started (the session runs in its own process).
"""

from __future__ import annotations

import pytest

from nemo_polar.bench.fake_upstream import SERVED_MODEL, FakeUpstreamThread
from nemo_polar.harnesses import HARNESSES
from tests.conftest import make_proxy
from tests.harness_calls import capture_requested, save_calls

from .conftest import run_harness

pytestmark = pytest.mark.harness

# leading dashes, a double space, quotes and a number: given after `--`, the instruction reaches the model as written
TASK = '--help  "all" 42 of the files here -- list them [fault:tool_call]'


def run_cline(proxy, tmp_path, **route):
    harness = HARNESSES.make("cline", {})
    run = run_harness(proxy, harness, tmp_path, TASK, 5, 60, sandbox=True, model=SERVED_MODEL, **route)
    return run.returncode, run.stdout, run.stderr, run.home, run.records


def test_tool_turns_keep_one_growing_history_of_the_agents_own_calls(tmp_path):
    with FakeUpstreamThread() as up, make_proxy(up.url, tmp_path) as proxy:
        rc, out, err, home, records = run_cline(proxy, tmp_path)
    assert rc == 0, (out[-2000:], err[-2000:])
    assert [r.status for r in records] == ["ok"] * 3, [r.error for r in records]
    bodies = [r.native_request for r in records]
    for r, body in zip(records, bodies, strict=True):
        assert r.dialect == "openai_chat" and r.stream is True and body["model"] == SERVED_MODEL
        assert body["messages"][0]["role"] == "system" and body["messages"][0]["content"].startswith("You are Cline")
        assert {t["function"]["name"] for t in body["tools"]} >= {"read_files", "run_commands", "editor"}
        assert HARNESSES["cline"].side_call(body) is None and r.prompt_token_ids and r.completion_token_ids
    assert bodies[0]["messages"][1] == {"role": "user", "content": TASK}  # the instruction exactly
    for before, after in zip(bodies, bodies[1:], strict=False):  # history grows, never rewritten
        assert after["messages"][: len(before["messages"])] == before["messages"]
        assert len(after["messages"]) == len(before["messages"]) + 2
    call, result = bodies[1]["messages"][2:4]
    assert call["tool_calls"][0]["function"]["name"] == "read_files"
    assert result["role"] == "tool" and "Invalid input" in result["content"]  # the tool ran and refused the input
    # its sessions and log in its own HOME; no hub daemon (its log, its lock) beside the run
    assert ".cline/data/logs/cline.log" in home and any(p.endswith(".messages.json") for p in home)
    assert not any("hub" in p for p in home), [p for p in home if "hub" in p]
    if capture_requested("cline"):
        save_calls("cline", HARNESSES["cline"].pin.version, records)


def test_it_is_stopped_by_its_budget(tmp_path):
    """No step limit of its own: the proxy refuses the call past `max_calls` with a terminal 400 and Cline exits."""
    with FakeUpstreamThread() as up, make_proxy(up.url, tmp_path) as proxy:
        rc, out, err, _, records = run_cline(proxy, tmp_path, max_calls=2)
        spent = proxy.proxy.budget_spent(records[0].session_id)
    assert rc != 0 and len(records) == 2 and spent.startswith("session budget spent: 2 model calls"), (rc, out[-1500:])
