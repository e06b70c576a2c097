"""`polar export`: records as JSONL, one CompletionRecord per line."""

from __future__ import annotations

import json
import subprocess
import sys

import openai

from nemo_polar.records import CompletionRecord


def test_export_writes_every_record_as_a_line(proxy, session, tmp_path):
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key=session["api_key"], max_retries=0)
    for text in ("one", "two"):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": text}], max_tokens=3)
    proxy.proxy.store.flush()
    out = tmp_path / "records.jsonl"
    store = proxy.proxy.config.store.path
    cmd = [sys.executable, "-m", "nemo_polar.cli", "export", "--store", store, "--session", session["session_id"]]
    subprocess.run([*cmd, "--out", str(out)], check=True, timeout=60)
    lines = [CompletionRecord.model_validate(json.loads(line)) for line in out.read_text().splitlines()]
    assert [r.seq for r in lines] == [0, 1] and all(r.completion_token_ids == [1000, 1001, 1002] for r in lines)
