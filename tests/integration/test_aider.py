"""Aider, the real CLI in a bubblewrap sandbox, through the real proxy to the fake upstream: what it sends.

Aider has no tools: it asks for edits in a text format and applies what the answer holds. Its one message is one
streamed call (few-shot examples, the repository map, the files the task names, then the task with its format
reminder); the fake's answer ends with `finish_reason: length`, which aider reports as a token limit and ends on, so
no reflection follows (at most 3 would, on an edit that fails to apply). Nothing beside the agent is called (its weak
model's summary comes only with a long history), nothing is committed, and its histories stay in its HOME.
"""

from __future__ import annotations

import asyncio
import subprocess

import pytest

from nemo_polar.bench.fake_upstream import SERVED_MODEL, FakeUpstreamThread
from nemo_polar.harnesses import HARNESSES, Endpoint
from nemo_polar.harnesses.install import check_install
from nemo_polar.runtimes.local import LocalRuntime
from nemo_polar.runtimes.toolchain import TOOLS
from tests.conftest import make_proxy
from tests.harness_calls import capture_requested, save_calls

pytestmark = [
    pytest.mark.harness,
    pytest.mark.skipif(
        not (TOOLS / "aider" / "bin" / "python3").exists(),
        reason=f"Aider is not installed at {TOOLS / 'aider'}: run scripts/setup.sh aider",
    ),
]

TASK = 'Make hello.py  say "bye" 42 -- --help [fault:echo]'
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]


def test_one_message_is_one_streamed_call_and_nothing_is_committed(tmp_path):
    harness = HARNESSES.make("aider", {"context": 16384, "max_tokens": 512})
    check_install(harness)
    with FakeUpstreamThread() as up, make_proxy(up.url, tmp_path) as proxy:
        session = proxy.proxy.sessions.open(max_calls=5)

        async def run():
            runtime = LocalRuntime(tmp_path, sandbox=True, session_id="aider", proxy_url=proxy.url)
            await runtime.start()
            try:
                work = runtime.work
                (work / "hello.py").write_text('print("hi")\n')
                for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "start"]):
                    subprocess.run([*GIT, *args], cwd=work, check=True)
                endpoint = Endpoint(runtime.proxy_url, session.api_key, SERVED_MODEL)
                launch = harness.launch(TASK, endpoint, runtime.inside(), 5)
                launch.write_files(runtime.home)
                rc, out, err = await runtime.exec(launch.argv, launch.env, timeout=90)
                home = sorted(str(p.relative_to(runtime.home)) for p in runtime.home.rglob("*"))
                status = subprocess.run(["git", "status", "--porcelain"], cwd=work, capture_output=True, text=True)
                commits = subprocess.run(
                    ["git", "rev-list", "--count", "HEAD"], cwd=work, capture_output=True, text=True
                )
                return rc, out, err, home, status.stdout, commits.stdout.strip()
            finally:
                await runtime.stop()

        rc, out, err, home, status, commits = asyncio.run(run())
        proxy.proxy.store.flush()
        records = proxy.proxy.store.records(session.id)
    assert rc == 0, (out[-2000:], err[-2000:])
    assert [r.status for r in records] == ["ok"], [r.error for r in records]
    (record,) = records
    body = record.native_request
    assert record.dialect == "openai_chat" and record.stream is True and body["stream"] is True
    assert record.prompt_token_ids and record.completion_token_ids
    assert body["model"] == SERVED_MODEL and "tools" not in body and body["temperature"] == 0
    messages = body["messages"]
    assert messages[0]["role"] == "system" and messages[0]["content"].startswith("Act as an expert software developer")
    assert messages[-1]["role"] == "user" and messages[-1]["content"].startswith(TASK)  # then its format reminder
    # the file the task names is added to the chat, its content given
    assert any('hello.py\n```\nprint("hi")\n```' in m["content"] for m in messages if m["role"] == "user")
    assert "token limit" in out + err  # the fake's finish_reason `length`: it ends there, no reflection
    assert not HARNESSES["aider"].side_call(body)
    # no commit, no edit, no history files: at most its repository map's tag cache
    assert commits == "1" and status.strip() in ("", "?? .aider.tags.cache.v4/")
    assert {".aider/chat.history.md", ".aider/llm.history"} <= set(home)
    assert not any(p.startswith(".npm") for p in home)
    if capture_requested("aider"):
        save_calls("aider", harness.pin.version, records)
