"""Faults of real processes around a gateway node (`polar serve-gateway` in its own process group):
`kill -9` of the node mid-session, and a result callback lost while the rollout server is down.
Nothing finished is lost, nothing is counted twice, every session ends in a terminal state."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from nemo_polar.local.docker_engine import image_name
from nemo_polar.server.rollout import RolloutConfig, RolloutThread
from nemo_polar.serving import free_port

from ...conftest import requires_docker

TOKEN = "tok"
H = {"x-polar-control-token": TOKEN}
TERMINAL = {"completed", "error", "timeout", "cancelled"}


def polar(*args: str) -> list[str]:
    return [sys.executable, "-m", "nemo_polar.cli", *args]


def spawn(argv: list[str], log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def wait_for(pred, timeout: float, what: str, every: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            got = pred()
        except httpx.HTTPError:
            got = None
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def gateway(tmp_path: Path, node_id: str, rollout_url: str, upstream_url: str, **extra: str) -> tuple:
    port = free_port()
    overrides = {
        "proxy.port": str(port),
        "proxy.upstream.url": upstream_url,
        "proxy.store.path": str(tmp_path / f"{node_id}.sqlite"),
        "node.node_id": node_id,
        "node.rollout_url": rollout_url,
        "node.root": str(tmp_path / node_id),
        "node.heartbeat_s": "0.2",
        "node.control_token": TOKEN,
        "node.capacity": "{init: 2, run: 2, postrun: 2, ready: 0}",
    } | extra
    proc = spawn(polar("serve-gateway", *(f"{k}={v}" for k, v in overrides.items())), tmp_path / f"{node_id}.log")
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: httpx.get(url + "/health", timeout=1).status_code == 200, 60, f"{node_id} to listen")
    return proc, url


def rollout_config(tmp_path: Path) -> RolloutConfig:
    """A rollout server in this process that reaps lost nodes at once."""
    return RolloutConfig(
        port=0, control_token=TOKEN, reap_interval_s=0.1, store={"path": str(tmp_path / "rollout.sqlite")}
    )


def node_up(tmp_path: Path, node_id: str, rollout_url: str, upstream_url: str) -> subprocess.Popen:
    """A gateway node's process, once it has registered."""
    proc, _ = gateway(tmp_path, node_id, rollout_url, upstream_url)
    wait_for(lambda: node_registered(rollout_url, node_id), 30, f"{node_id} to register")
    return proc


def node_registered(rollout_url: str, node_id: str) -> bool:
    nodes = httpx.get(rollout_url + "/nodes", headers=H, timeout=2).json()["nodes"]
    return any(n["node_id"] == node_id and n["healthy"] for n in nodes)


def task_body(rollout_url: str, task_id: str) -> dict:
    return httpx.get(f"{rollout_url}/tasks/{task_id}", headers=H, timeout=5).json()


def sandboxed_processes(marker: str) -> list[int]:
    """Processes whose command line holds `marker` (a unique sleep length), read from /proc."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


@pytest.mark.skipif(not os.path.exists("/usr/bin/bwrap"), reason="needs bubblewrap: sandboxes die with their node")
def test_kill_9_of_a_node_mid_session(fake_upstream, tmp_path):
    """The node dies with two sessions running and two waiting on it: the running ones end in error
    (masked), the waiting ones go to another node and complete there; no sandbox process survives."""
    # Sessions started before `slow_until` hang (the sandbox's private /tmp hides flag files, the clock
    # does not); the re-queued ones, started on n2 after it, finish at once.
    slow_until = int(time.time()) + 15
    marker = f"{61 + os.getpid() % 1000}.{os.getpid() % 997}"  # a sleep length unique to this run
    command = f"[ $(date +%s) -ge {slow_until} ] || sleep {marker}; echo done > out.txt"
    with RolloutThread(rollout_config(tmp_path)) as rollout:
        first = node_up(tmp_path, "n1", rollout.url, fake_upstream.url)
        try:
            task = {
                "task_id": "t",
                "instruction": "work",
                "num_samples": 4,
                "harness": {"name": "shell", "command": command},
            }
            assert httpx.post(rollout.url + "/tasks", json=task, headers=H).status_code == 201
            wait_for(
                lambda: [s["state"] for s in task_body(rollout.url, "t")["sessions"]].count("running") == 2,
                60,
                "two sessions running on n1",
            )
            assert len(sandboxed_processes(marker)) >= 2
            kill(first)
        finally:
            kill(first)
        # every sandbox died with its node (bubblewrap --die-with-parent), none waits to be reaped by hand
        wait_for(lambda: not sandboxed_processes(marker), 10, "the sandboxes to die with the node")
        time.sleep(max(0.0, slow_until + 1 - time.time()))
        second, _ = gateway(tmp_path, "n2", rollout.url, fake_upstream.url)
        try:
            body = wait_for(
                lambda: (b := task_body(rollout.url, "t"))["status"] != "running" and b, 90, "the task to finish"
            )
        finally:
            kill(second)
    states = sorted(s["state"] for s in body["sessions"])
    assert states == ["completed", "completed", "error", "error"], body
    for s in body["sessions"]:
        result = s["result"]
        if s["state"] == "error":
            assert result["masked"] and result["reward"] is None and "node lost" in result["error"]
        else:
            assert result["node_id"] == "n2" and result["reward"] == 1.0 and not result["masked"]
    assert sorted(p.name for p in (tmp_path / "n2").iterdir()) == ["logs", "outbox", "traces"]


def test_a_result_lost_while_the_rollout_server_is_down_is_delivered_once_from_the_outbox(fake_upstream, tmp_path):
    """The rollout server is killed -9 while a session runs; the node finishes it, cannot deliver the
    result, keeps it in its outbox and delivers it after the server's restart. Counted once."""
    port, store = free_port(), tmp_path / "rollout.sqlite"
    rollout_url = f"http://127.0.0.1:{port}"
    serve = polar(
        "serve-rollout", f"port={port}", f"store.path={store}", f"control_token={TOKEN}", "reap_interval_s=0.1"
    )

    def start_rollout() -> subprocess.Popen:
        proc = spawn(serve, tmp_path / "rollout.log")
        wait_for(lambda: httpx.get(rollout_url + "/health", timeout=1).status_code == 200, 60, "rollout server")
        return proc

    rollout = start_rollout()
    node, _ = gateway(tmp_path, "n1", rollout_url, fake_upstream.url, **{"node.result_attempts": "1"})
    outbox = tmp_path / "n1" / "outbox"
    try:
        wait_for(lambda: node_registered(rollout_url, "n1"), 30, "n1 to register")
        task = {
            "task_id": "t",
            "instruction": "w",
            "num_samples": 1,
            "harness": {"name": "shell", "command": "sleep 2"},
        }
        assert httpx.post(rollout_url + "/tasks", json=task, headers=H).status_code == 201
        wait_for(lambda: task_body(rollout_url, "t")["sessions"][0]["state"] == "running", 60, "the session to run")
        kill(rollout)
        wait_for(lambda: list(outbox.glob("*.json")), 30, "the result to wait in the outbox")
        rollout = start_rollout()
        body = wait_for(lambda: (b := task_body(rollout_url, "t"))["status"] == "completed" and b, 30, "delivery")
        wait_for(lambda: not list(outbox.glob("*.json")), 10, "the outbox to empty")
    finally:
        kill(node)
        kill(rollout)
    (session,) = body["sessions"]
    assert session["state"] == "completed" and session["result"]["reward"] == 1.0
    log = (tmp_path / "rollout.log").read_text()
    assert "Traceback" not in log


@requires_docker
def test_kill_9_of_a_node_running_docker_sessions_leaves_no_container_after_its_restart(
    docker, fake_upstream, tmp_path
):
    """A node whose sessions run in containers is killed -9 mid-session: its containers outlive it (the engine
    owns them), and the node, started again on its folder, finds them by their label and removes them; the
    sessions end masked."""
    with RolloutThread(rollout_config(tmp_path)) as rollout:
        node = node_up(tmp_path, "n1", rollout.url, fake_upstream.url)
        try:
            task = {
                "task_id": "t",
                "instruction": "work",
                "num_samples": 2,
                "harness": {"name": "shell", "command": "sleep 120"},
                "runtime": {"kind": "docker", "image": image_name("bookworm")},
            }
            assert httpx.post(rollout.url + "/tasks", json=task, headers=H).status_code == 201
            running = lambda: [s["state"] for s in task_body(rollout.url, "t")["sessions"]] == ["running"] * 2  # noqa: E731
            wait_for(running, 90, "both agents running in their containers", every=0.5)
            assert len(docker.containers()) == 2
            kill(node)
            time.sleep(1)
            assert len(docker.containers()) == 2  # the engine's, not the node's: they outlived it
            node, _ = gateway(tmp_path, "n1", rollout.url, fake_upstream.url)
            assert docker.containers() == []  # removed as the node started, by its folder's label
            body = wait_for(lambda: (b := task_body(rollout.url, "t"))["status"] != "running" and b, 60, "the end")
        finally:
            kill(node)
    for s in body["sessions"]:
        assert s["state"] == "error" and s["result"]["masked"] and s["result"]["reward"] is None, s
