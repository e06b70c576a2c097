"""OpenClaw, the real CLI (`openclaw agent exec`) in a bubblewrap sandbox, through the real proxy to the fake upstream.

The task asks the fake for a tool call every time (`[fault:tool_call]`: the first tool it is given, `apply_patch`, with
`{"command": "ls"}`, which it rejects and reports back as the tool's result), and OpenClaw has no step limit of its
own, so only the session's budget ends the run: 3 model calls, then a terminal 400 and it exits. Every call is the
agent's own, streamed, with the same system prompt and tools. Each call ends with a user message of its own internal
context (active exec sessions, subagents) that the next call does not keep: the history grows as an exact prefix but
for that last message. Nothing is fetched (the sandbox reaches only the proxy) and no daemon is left behind.
"""

from __future__ import annotations

import json

import pytest

from nemo_polar.bench.fake_upstream import SERVED_MODEL, FakeUpstreamThread
from nemo_polar.harnesses import HARNESSES
from nemo_polar.runtimes.toolchain import TOOLS
from tests.conftest import make_proxy
from tests.harness_calls import capture_requested, save_calls

from .conftest import run_harness

pytestmark = [
    pytest.mark.harness,
    pytest.mark.skipif(
        not (TOOLS / "openclaw" / "bin" / "node").exists(),
        reason=f"OpenClaw is not installed at {TOOLS / 'openclaw'}: run scripts/setup.sh openclaw",
    ),
]

# leading dashes, a double space, quotes and a number: read from a file, never parsed as options


def notes(work):  # a file for its tools to find
    (work / "notes.txt").write_text("hello\n")


TASK = 'List the files  here: "all" 42 of them -- --help [fault:tool_call]'
INTERNAL = "<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>"


def test_a_tool_loop_is_stopped_by_its_budget_with_one_growing_history(tmp_path):
    harness = HARNESSES.make("openclaw", {"max_tokens": 321})
    with FakeUpstreamThread() as up, make_proxy(up.url, tmp_path) as proxy:
        run = run_harness(
            proxy, harness, tmp_path, TASK, 3, 90, sandbox=True, model=SERVED_MODEL, prepare=notes, max_calls=3
        )
        rc, out, err, home, records = run.returncode, run.stdout, run.stderr, run.home, run.records
        spent = proxy.proxy.budget_spent(run.session_id)
    assert rc == 1 and spent.startswith("session budget spent: 3 model calls"), (out[-2000:], err[-2000:])
    result = json.loads(out)  # --json: stdout is its result envelope alone
    assert result["status"] == "error" and "session budget spent" in result["error"]["message"]
    assert [r.status for r in records] == ["ok", "ok", "ok"], [r.error for r in records]
    assert all(
        r.dialect == "openai_chat" and r.stream and r.prompt_token_ids and r.completion_token_ids for r in records
    )
    bodies = [r.native_request for r in records]
    for body in bodies:
        assert body["model"] == SERVED_MODEL and body["stream"] is True and body["max_completion_tokens"] == 321
        assert body["messages"][0] == bodies[0]["messages"][0] and body["tools"] == bodies[0]["tools"]
        assert "You are a personal assistant running inside OpenClaw" in body["messages"][0]["content"]
        assert {t["function"]["name"] for t in body["tools"]} >= {"exec", "read", "write", "edit", "apply_patch"}
        assert body["messages"][-1]["role"] == "user" and INTERNAL in json.dumps(body["messages"][-1])
        assert HARNESSES["openclaw"].side_call(body) is None
    # the instruction word for word, after its timestamp and before its runtime line (session id, host, node)
    assert TASK in bodies[0]["messages"][1]["content"] and "Runtime: agent=main" in bodies[0]["messages"][1]["content"]
    for before, after in zip(bodies, bodies[1:], strict=False):  # one history, but for its trailing internal context
        assert after["messages"][: len(before["messages"]) - 1] == before["messages"][:-1]
    call, result = bodies[1]["messages"][2:4]
    assert call["tool_calls"][0]["function"] == {"name": "apply_patch", "arguments": '{"command":"ls"}'}
    assert result["role"] == "tool" and "Validation failed" in result["content"]  # the tool ran, and refused it
    # its run state kept in HOME (not deleted), nothing installed there
    assert ".openclaw/exec-state/state/openclaw.sqlite" in home
    assert not any(p.startswith(".npm") or "node_modules" in p for p in home), home
    if capture_requested("openclaw"):
        save_calls("openclaw", harness.pin.version, records)
