"""Hermes Agent, the real CLI in a bubblewrap sandbox, through the real proxy to the fake upstream: what it sends.

The task asks the fake for a tool call every time (`[fault:tool_call]`: the first tool it is given, with
`{"command": "ls"}`), so only its step limit ends the run: `max_steps` 3 is two streamed agent calls with tools and, at
its limit, its own summary call (not streamed, no tools, one more user message). All three continue one history: the
agent's calls byte for byte, the summary's with the tool call's arguments written again by `json.dumps` (a space after
the colon). Nothing beside the agent is called (no title, memory, review or compression call) and nothing is fetched
or installed (no tirith download, no npx browser, no update check).
"""

from __future__ import annotations

import json

import pytest

from nemo_polar.bench.fake_upstream import SERVED_MODEL, FakeUpstreamThread
from nemo_polar.harnesses import HARNESSES
from nemo_polar.harnesses.install import check_install
from nemo_polar.runtimes.toolchain import TOOLS
from tests.conftest import make_proxy
from tests.harness_calls import capture_requested, save_calls

from .conftest import run_harness

pytestmark = [
    pytest.mark.harness,
    pytest.mark.skipif(
        not (TOOLS / "hermes" / "bin" / "python3").exists(),
        reason=f"Hermes Agent is not installed at {TOOLS / 'hermes'}: run scripts/setup.sh hermes",
    ),
]


def notes(work):  # a file for its tools to find
    (work / "notes.txt").write_text("hello\n")


TASK = 'List the files  here: "all" 42 of them -- --help [fault:tool_call]'
TOOLS_GIVEN = {"terminal", "process", "read_file", "write_file", "patch", "search_files"}  # the terminal and file sets


def normal(messages: list[dict]) -> list[dict]:
    """The messages with each tool call's arguments parsed (its summary call writes them again)."""
    out = []
    for m in messages:
        calls = [
            dict(c, function=dict(c["function"], arguments=json.loads(c["function"]["arguments"])))
            for c in m.get("tool_calls") or []
        ]
        out.append(dict(m, tool_calls=calls) if calls else m)
    return out


def test_its_steps_end_in_its_summary_call_within_max_steps(tmp_path):
    harness = HARNESSES.make("hermes", {"max_tokens": 321})
    with FakeUpstreamThread() as up, make_proxy(up.url, tmp_path) as proxy:
        run = run_harness(proxy, harness, tmp_path, TASK, 3, 90, sandbox=True, model=SERVED_MODEL, prepare=notes)
        rc, out, err, home, records = run.returncode, run.stdout, run.stderr, run.home, run.records
    assert rc == 0, (out[-2000:], err[-2000:])
    assert [r.status for r in records] == ["ok", "ok", "ok"], [r.error for r in records]
    assert all(r.dialect == "openai_chat" and r.prompt_token_ids and r.completion_token_ids for r in records)
    first, second, summary = (r.native_request for r in records)
    for body in (first, second):
        assert body["model"] == SERVED_MODEL and body["stream"] is True and body["max_tokens"] == 321
        assert body["messages"][0]["role"] == "system" and body["messages"][0]["content"].startswith(
            "You are Hermes Agent"
        )
        assert {t["function"]["name"] for t in body["tools"]} == TOOLS_GIVEN
    assert first["messages"][1] == {"role": "user", "content": TASK}  # the instruction exactly
    assert second["messages"][: len(first["messages"])] == first["messages"]  # history grows, never rewritten
    call, result = second["messages"][2:4]
    assert call["tool_calls"][0]["function"]["arguments"] == '{"command":"ls"}' and result["role"] == "tool"
    # its step limit (max_steps - 1 turns) reached: one more call, not streamed, without tools, asking for a summary
    assert records[2].stream is False and "tools" not in summary and summary["max_tokens"] == 321
    asked = summary["messages"][-1]
    assert asked["role"] == "user" and "maximum number of tool-calling iterations" in asked["content"]
    n = len(second["messages"])  # then the second call's answer, then that request
    assert normal(summary["messages"][:n]) == normal(second["messages"]) and len(summary["messages"]) == n + 2
    assert summary["messages"][:n] != second["messages"]  # only the arguments' spacing differs
    assert not any(HARNESSES["hermes"].side_call(b) for b in (first, second, summary))
    # nothing fetched or installed into its HOME; its own logs and session store are there
    assert ".hermes/logs/agent.log" in home and ".hermes/state.db" in home
    assert not any(p.startswith((".npm", ".hermes/bin")) or "tirith" in p for p in home), home
    if capture_requested("hermes"):
        save_calls("hermes", harness.pin.version, records)


@pytest.mark.vllm
def test_hermes_runs_through_the_proxy_token_faithfully(real_proxy, tokenizer, tmp_path):
    """On the tiny model: its agent calls streamed, and at its step limit (max_steps 2: one turn) its summary call
    not; every one recorded with token ids and one logprob per completion token."""
    from .conftest import run_harness

    harness = HARNESSES["hermes"]()
    check_install(harness)
    run = run_harness(real_proxy, harness, tmp_path, task="Say hello in one word.", max_steps=2)
    assert run.returncode == 0, f"hermes exited {run.returncode}:\n{run.stdout[-2000:]}\n{run.stderr[-3000:]}"
    assert 1 <= len(run.records) <= 2, [r.native_request["messages"][-1] for r in run.records]
    for rec in run.records:
        assert rec.status == "ok", (rec.status, rec.error)
        assert rec.dialect == "openai_chat" and rec.stream is ("tools" in rec.native_request)  # the summary: neither
        assert rec.prompt_token_ids and rec.completion_token_ids
        assert len(rec.completion_logprobs) == len(rec.completion_token_ids)
        assert rec.upstream_request["return_token_ids"] is True
        if not rec.message["tool_calls"]:
            assert tokenizer.decode(rec.completion_token_ids, skip_special_tokens=True) == rec.message["content"]
    assert run.records[0].stream is True
    assert all(run.api_key not in rec.model_dump_json() for rec in run.records)
