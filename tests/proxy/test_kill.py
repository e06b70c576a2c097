"""`kill -9` of a real proxy process under load, then a restart on the same store: every call whose
answer a harness received in full has its record (the last byte goes out only once the record is
committed), the store passes SQLite's integrity check, and the restarted proxy goes on."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import threading
import time

import httpx

from nemo_polar.bench.fake_upstream import FakeUpstreamThread
from nemo_polar.bench.proxy import spawn
from nemo_polar.serving import free_port
from nemo_polar.store import SqliteStore


def start(port: int, store: str, upstream: str) -> subprocess.Popen:
    args = ["-m", "nemo_polar.cli", "proxy", f"port={port}", f"store.path={store}", f"upstream.url={upstream}"]
    return spawn(args, f"http://127.0.0.1:{port}/health")


def harness(url: str, key: str, n: int, answered: list[str], stop: threading.Event) -> None:
    """Calls in a loop, half of them streamed; a call counts as answered once its last byte arrived."""
    headers = {"authorization": f"Bearer {key}"}
    with httpx.Client(base_url=url, timeout=10) as client:
        for i in range(10_000):
            if stop.is_set():
                return
            marker = f"call-{n}-{i}"
            body = {"model": "m", "messages": [{"role": "user", "content": marker}], "stream": i % 2 == 1}
            try:
                if body["stream"]:
                    with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as r:
                        text = b"".join(r.iter_bytes()).decode()
                    if r.status_code == 200 and text.endswith("data: [DONE]\n\n"):
                        answered.append(marker)
                else:
                    r = client.post("/v1/chat/completions", json=body, headers=headers)
                    if r.status_code == 200 and r.json()["choices"][0]["message"]["content"]:
                        answered.append(marker)
            except (httpx.HTTPError, ValueError):
                return  # the proxy is gone


def test_kill_9_under_load_loses_no_answered_call(tmp_path):
    port, store = free_port(), str(tmp_path / "records.sqlite")
    url = f"http://127.0.0.1:{port}"
    with FakeUpstreamThread(tokens=16, token_delay_s=0.002) as upstream:
        proc = start(port, store, upstream.url)
        try:
            keys = [httpx.post(url + "/admin/sessions", json={}).json()["api_key"] for _ in range(8)]
            answered: list[str] = []
            stop = threading.Event()
            threads = [threading.Thread(target=harness, args=(url, k, n, answered, stop)) for n, k in enumerate(keys)]
            for t in threads:
                t.start()
            time.sleep(3)
            os.killpg(proc.pid, signal.SIGKILL)  # mid-load: calls in flight, records queued
            proc.wait(10)
            stop.set()
            for t in threads:
                t.join(15)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        assert len(answered) > 50, "too little load to show anything"
        conn = sqlite3.connect(store)
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        conn.close()
        kept = SqliteStore(store)
        recorded = {r.native_request["messages"][0]["content"] for r in kept.records() if r.status == "ok"}
        kept.close()
        lost = [m for m in answered if m not in recorded]
        assert lost == [], f"{len(lost)} of {len(answered)} answered calls have no record"
        again = start(port, store, upstream.url)  # and the proxy comes back on the same store
        try:
            r = httpx.post(
                url + "/v1/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": "after"}]},
                headers={"authorization": f"Bearer {keys[0]}"},
            )
            assert r.status_code == 200, r.text
        finally:
            os.killpg(again.pid, signal.SIGTERM)
            again.wait(10)
