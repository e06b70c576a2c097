"""`kill -9` of a real rollout server process mid-run, then a restart on the same store: every
finished result is intact, every in-flight session ends in a terminal state with its cause, queued
sessions wait to be dispatched again, and a late duplicate result is not counted twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import httpx

from nemo_polar.bench.proxy import spawn
from nemo_polar.serving import free_port

H = {"x-polar-control-token": "tok"}


def start(port: int, store: str) -> subprocess.Popen:
    args = ["-m", "nemo_polar.cli", "serve-rollout", f"port={port}", f"store.path={store}", "control_token=tok"]
    args += ["dispatch=false", "keep_live_nodes_on_restart=false"]
    return spawn(args, f"http://127.0.0.1:{port}/health")


def test_kill_9_mid_run_then_restart_loses_nothing(tmp_path):
    port, store = free_port(), str(tmp_path / "rollout.sqlite")
    url = f"http://127.0.0.1:{port}"
    proc = start(port, store)
    try:
        task = {"task_id": "t", "instruction": "x", "num_samples": 3, "harness": {"name": "pi"}}
        ids = httpx.post(url + "/tasks", json=task, headers=H).json()["session_ids"]
        node = {"node_id": "n1", "url": "http://127.0.0.1:1"}
        assert httpx.post(url + "/nodes", json=node, headers=H).status_code < 300
        done, running, queued = ids
        for sid, state in ((done, "running"), (running, "running")):
            r = httpx.post(
                url + "/callbacks/session_state", json={"session_id": sid, "state": state, "node_id": "n1"}, headers=H
            )
            assert r.status_code == 200, r.text
        result = {"session_id": done, "task_id": "t", "status": "completed", "reward": 1.0, "node_id": "n1"}
        assert httpx.post(url + "/callbacks/session_result", json=result, headers=H).status_code == 200
        os.killpg(proc.pid, signal.SIGKILL)  # mid-run, nothing flushed on purpose
        proc.wait(10)
        proc = start(port, store)
        sessions = {s["session_id"]: s for s in httpx.get(url + "/tasks/t", headers=H).json()["sessions"]}
        assert sessions[done]["state"] == "completed" and sessions[done]["result"]["reward"] == 1.0
        assert sessions[running]["state"] == "error" and sessions[running]["result"]["masked"]
        assert "restarted" in (sessions[running]["result"]["error"] or "")
        assert sessions[queued]["state"] == "registered"
        again = httpx.post(url + "/callbacks/session_result", json=result, headers=H)
        assert again.status_code == 200 and again.json().get("duplicate") is True
        shown = subprocess.run(
            [sys.executable, "-m", "nemo_polar.cli", "status", "--url", url],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            env=os.environ | {"POLAR_CONTROL_TOKEN": "tok"},  # every read wants the token
        ).stdout
        assert "completed 1" in shown and "error 1" in shown and "registered 1" in shown and "n1" in shown
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
