"""opencode, the real CLI in a bubblewrap sandbox, through the real proxy: what it sends over a tool turn.

The upstream is the fake server (a random model almost never calls a tool): the task asks it for a tool
call (`[fault:tool_call]`, so opencode runs `ls`), and the file `[fault:echo]` in the working copy, once
listed, makes the next answer plain text, which ends the run. Two calls, every one the agent's own: its
system prompt and tools, the instruction word for word, each call's history an exact prefix of the next
(nothing compacted or pruned, no title call beside them), and nothing fetched from the network (the
sandbox reaches only the proxy; the plugin install it would start is not attempted).
"""

from __future__ import annotations

import asyncio

import pytest

from nemo_polar.bench.fake_upstream import SERVED_MODEL, FakeUpstreamThread
from nemo_polar.harnesses import HARNESSES, Endpoint
from nemo_polar.harnesses.install import check_install
from nemo_polar.runtimes.local import LocalRuntime
from tests.conftest import make_proxy

pytestmark = pytest.mark.harness

# leading dashes, a double space, quotes and a number: opencode gets words, not one argument, and must join them back
TASK = 'List the files  here: "all" 42 of them -- --help [fault:tool_call]'


def run_opencode(proxy, tmp_path, max_tokens: int):
    harness = HARNESSES.make("opencode", {"max_tokens": max_tokens, "context": 16384})
    check_install(harness)
    session = proxy.proxy.sessions.open()

    async def run() -> tuple[int, str, str, list[str]]:
        runtime = LocalRuntime(tmp_path, sandbox=True, session_id="oc", proxy_url=proxy.url)
        await runtime.start()
        try:
            (runtime.work / "[fault:echo]").write_text("")
            launch = harness.launch(
                TASK, Endpoint(runtime.proxy_url, session.api_key, SERVED_MODEL), runtime.inside(), 5
            )
            launch.write_files(runtime.home)
            rc, out, err = await runtime.exec(launch.argv, launch.env, timeout=60)
            home = sorted(str(p.relative_to(runtime.home)) for p in runtime.home.rglob("*"))
            return rc, out, err, home
        finally:
            await runtime.stop()

    rc, out, err, home = asyncio.run(run())
    proxy.proxy.store.flush()
    return rc, out, err, home, proxy.proxy.store.records(session.id)


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
