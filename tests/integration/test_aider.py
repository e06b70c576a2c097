"""Aider, the real CLI in a bubblewrap sandbox, through the real proxy to the fake upstream: what it sends.

Aider has no tools: it asks for edits in a text format and applies what the answer holds. Its one message is one
streamed call (few-shot examples, the repository map, the files the task names, then the task with its format
reminder); the fake's answer ends with `finish_reason: length`, which aider reports as a token limit and ends on, so
no reflection follows (at most 3 would, on an edit that fails to apply). Nothing beside the agent is called (its weak
model's summary comes only with a long history), nothing is committed, and its histories stay in its HOME.
"""

from __future__ import annotations

import subprocess

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
        not (TOOLS / "aider" / "bin" / "python3").exists(),
        reason=f"Aider is not installed at {TOOLS / 'aider'}: run scripts/setup.sh aider",
    ),
]

TASK = 'Make hello.py  say "bye" 42 -- --help [fault:echo]'
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]


def test_one_message_is_one_streamed_call_and_nothing_is_committed(tmp_path):
    harness = HARNESSES.make("aider", {"context": 16384, "max_tokens": 512})

    def repository(work):
        (work / "hello.py").write_text('print("hi")\n')
        for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "start"]):
            subprocess.run([*GIT, *args], cwd=work, check=True)

    def git_state(work):
        status = subprocess.run(["git", "status", "--porcelain"], cwd=work, capture_output=True, text=True)
        commits = subprocess.run(["git", "rev-list", "--count", "HEAD"], cwd=work, capture_output=True, text=True)
        return status.stdout, commits.stdout.strip()

    with FakeUpstreamThread() as up, make_proxy(up.url, tmp_path) as proxy:
        run = run_harness(
            proxy, harness, tmp_path, TASK, 5, 90, sandbox=True, model=SERVED_MODEL, prepare=repository,
            after=git_state, max_calls=5,
        )  # fmt: skip
    rc, out, err, home, records, (status, commits) = (
        run.returncode, run.stdout, run.stderr, run.home, run.records, run.read
    )  # fmt: skip
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
