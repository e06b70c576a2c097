"""`polar traces`: every session of a store built into JSONL traces, with its stats."""

from __future__ import annotations

import json
import subprocess
import sys

import openai

from nemo_polar.traces.export import read_jsonl


def test_traces_command_builds_each_session(proxy, session, tmp_path):
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key=session["api_key"], max_retries=0)
    messages = [{"role": "user", "content": "one"}]
    first = client.chat.completions.create(model="m", messages=messages, max_tokens=3)
    proxy.proxy.store.flush()
    out = tmp_path / "traces"
    cmd = [
        sys.executable,
        "-m",
        "nemo_polar.cli",
        "traces",
        "--store",
        proxy.proxy.config.store.path,
        "--out",
        str(out),
        "--json",
    ]
    summary = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=60).stdout)
    (stats,) = summary
    assert stats["session_id"] == session["session_id"] and stats["traces"] == 1 and stats["trainable"] == 1
    (trace,) = read_jsonl(out / f"{session['session_id']}.jsonl")
    assert trace.response_ids == [1000, 1001, 1002] and trace.loss_mask == [1, 1, 1]
    assert first.choices[0].message.content == "w0 w1 w2"
