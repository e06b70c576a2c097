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


def test_no_repair_forks_a_new_chain_where_a_drift_would_be_repaired(tmp_path):
    """The next prompt re-tokenised a sample: by default the chain goes on (repaired); `--no-repair` forks."""
    from nemo_polar.records import Session
    from nemo_polar.store import SqliteStore
    from tests.traces.test_builders import EOT, rec

    store = SqliteStore(tmp_path / "records.sqlite")
    store.add_session(Session(id="s", created_at=0))
    for record in (rec("c1", 0, [1, 2], [10, 11, EOT]), rec("c2", 1, [1, 2, 12, EOT, 5], [20, EOT])):
        store.add_record(record)
    store.close()

    def traces(*flags: str) -> dict:
        argv = ["traces", "--store", str(tmp_path / "records.sqlite"), "--out", str(tmp_path / "t"), "--json"]
        cmd = [sys.executable, "-m", "nemo_polar.cli", *argv, *flags]
        (stats,) = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=60).stdout)
        return stats

    repaired, forked = traces(), traces("--no-repair")
    assert repaired["traces"] == 1 and repaired["repaired"] == {"retokenization": 1}
    assert forked["traces"] == 2 and forked["repaired"] == {} and forked["drift"] == {"retokenization": 1}
