"""A task through the whole system on real processes' code paths: rollout server -> dispatch ->
gateway node (proxy + staged pipeline) -> Pi in a bubblewrap sandbox -> results and traces back."""

from __future__ import annotations

import time

import httpx
from rich.console import Console

from nemo_polar.cli.status import fetch, render
from nemo_polar.config import ProxyConfig
from nemo_polar.proxy.app import Proxy
from nemo_polar.proxy.serve import free_port
from nemo_polar.server.gateway.node import GatewayNode, NodeConfig, NodeThread
from nemo_polar.server.rollout import RolloutConfig, RolloutThread
from nemo_polar.traces.export import read_jsonl


def test_a_task_runs_on_a_node_and_every_session_reports(fake_upstream, tmp_path):
    rollout_cfg = RolloutConfig(port=0, control_token="tok", store={"path": str(tmp_path / "rollout.sqlite")})
    with RolloutThread(rollout_cfg) as rollout:
        port = free_port()
        proxy = Proxy(
            ProxyConfig.model_validate(
                {
                    "port": port,
                    "store": {"path": str(tmp_path / "records.sqlite")},
                    "upstream": {"url": fake_upstream.url, "timeout_s": 30},
                }
            )
        )
        node = GatewayNode(
            NodeConfig(
                node_id="n1",
                rollout_url=rollout.url,
                public_url=f"http://127.0.0.1:{port}",
                root=str(tmp_path / "node"),
                heartbeat_s=0.2,
                control_token="tok",
            ),
            proxy,
        )
        with NodeThread(node, "127.0.0.1", port):
            node_url = f"http://127.0.0.1:{port}"
            # a sandbox shares this port: without the node's own token, its routes answer 401
            for method, path in (("POST", "/sessions"), ("DELETE", "/sessions/x"), ("POST", "/admin/inference/pause")):
                assert (
                    httpx.request(method, node_url + path, headers={"x-polar-control-token": "tok"}).status_code == 401
                )
            headers = {"x-polar-control-token": "tok"}
            assert "token" not in httpx.get(rollout.url + "/nodes", headers=headers).text  # never shown, even so
            task = {
                "task_id": "t1",
                "instruction": "Say hello.",
                "num_samples": 2,
                "harness": {"name": "pi", "max_steps": 2},
                "agent_timeout_s": 120,
            }
            assert httpx.post(rollout.url + "/tasks", json=task, headers=headers).status_code in (200, 201)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                body = httpx.get(rollout.url + "/tasks/t1", headers=headers).json()
                if body.get("status") not in (None, "running", "pending"):
                    break
                time.sleep(0.3)
            # each session's rollup travels with its result; the task list sums them; polar status prints both
            listed = {t["task_id"]: t for t in httpx.get(rollout.url + "/tasks", headers=headers).json()["tasks"]}
            listed = listed["t1"]
            shown = fetch(rollout.url, "t1", "tok")
        rollups = [s["result"]["rollup"] for s in body["sessions"]]
        assert all(r["calls"] >= 1 and r["prompt_tokens"] > 0 and r["trained_tokens"] > 0 for r in rollups), rollups
        assert listed["rollup"]["calls"] == sum(r["calls"] for r in rollups)
        assert listed["rollup"]["trained_tokens"] == sum(r["trained_tokens"] for r in rollups)
        console = Console(width=200, record=True)
        render(shown, console)
        printed = console.export_text()
        assert f"{listed['rollup']['trained_tokens']:,}" in printed and "sessions of t1" in printed
        for s in body["sessions"]:
            assert s["session_id"] in printed
        sessions = body["sessions"]
        assert len(sessions) == 2, body
        for s in sessions:
            assert s["state"] == "completed", s
            result = s["result"]
            assert result["reward"] == 1.0 and not result["masked"] and result["node_id"] == "n1"
            (trace,) = read_jsonl(result["traces_path"])
            assert sum(trace.loss_mask) > 0
        assert sorted(p.name for p in (tmp_path / "node").iterdir()) == [
            "logs",
            "outbox",
            "traces",
        ]  # sandboxes recycled
        assert not any((tmp_path / "node" / "outbox").iterdir())  # every result acknowledged
        proxy.store.close()


def quick_node(tmp_path, rollout_url: str) -> tuple[GatewayNode, int]:
    """A node (and its port) that heartbeats every 0.2 s, its proxy on the default upstream."""
    port = free_port()
    proxy = Proxy(ProxyConfig.model_validate({"port": port, "store": {"path": str(tmp_path / "r.sqlite")}}))
    config = NodeConfig(
        node_id="n1",
        rollout_url=rollout_url,
        public_url=f"http://127.0.0.1:{port}",
        root=str(tmp_path / "node"),
        heartbeat_s=0.2,
    )
    return GatewayNode(config, proxy), port


def test_heartbeats_outlive_an_unexpected_failure(fake_upstream, tmp_path, monkeypatch):
    """Anything the heartbeat raises (not only the rollout server being away) is logged and tried again:
    a node whose heartbeats stop is declared lost, and its sessions with it."""
    with RolloutThread(RolloutConfig(port=0, store={"path": str(tmp_path / "rollout.sqlite")})) as rollout:
        node, port = quick_node(tmp_path, rollout.url)
        proxy = node.proxy
        failures = []
        metrics = node.pipeline.metrics

        def flaky():
            if len(failures) < 3:
                failures.append(1)
                raise ValueError("a bug in a metric")
            return metrics()

        monkeypatch.setattr(node.pipeline, "metrics", flaky)
        with NodeThread(node, "127.0.0.1", port):
            deadline, seen = time.monotonic() + 20, []
            while time.monotonic() < deadline and len(set(seen)) < 3:
                seen += [n["last_heartbeat"] for n in httpx.get(rollout.url + "/nodes").json()["nodes"]]
                time.sleep(0.2)
        proxy.store.close()
    assert len(failures) == 3 and len(set(seen)) >= 3  # it failed three times and kept beating after


def test_a_post_run_that_fails_still_sends_the_server_a_result_saying_why(fake_upstream, tmp_path, monkeypatch):
    """POST-RUN is where a session's result is made; when it raises, the server gets the session masked with the
    error at once, not after waiting out its session timeout, and the node keeps nothing of it."""
    with RolloutThread(RolloutConfig(port=0, store={"path": str(tmp_path / "rollout.sqlite")})) as rollout:
        node, port = quick_node(tmp_path, rollout.url)
        proxy = node.proxy
        result = node.stages._result

        def broken(job, evaluation):
            if job.data.request.sample_index == 0:
                raise ValueError("a bug in building traces")
            return result(job, evaluation)

        monkeypatch.setattr(node.stages, "_result", broken)
        task = {
            "task_id": "t",
            "instruction": "w",
            "num_samples": 2,
            "harness": {"name": "shell", "command": "true"},
            "session_timeout_s": 600,
        }
        with NodeThread(node, "127.0.0.1", port):
            assert httpx.post(rollout.url + "/tasks", json=task).status_code == 201
            t0, body = time.monotonic(), {}
            while time.monotonic() - t0 < 60 and body.get("status") != "completed":
                body = httpx.get(rollout.url + "/tasks/t").json()
                time.sleep(0.2)
            waited = time.monotonic() - t0
            left = dict(node.jobs)
        proxy.store.close()
    by_sample = {s["sample_index"]: s for s in body["sessions"]}
    assert body["status"] == "completed" and waited < 60, body
    assert by_sample[1]["state"] == "completed" and not by_sample[1]["result"]["masked"]
    lost = by_sample[0]["result"]
    assert by_sample[0]["state"] == "error" and lost["masked"] and lost["node_id"] == "n1"
    assert lost["error"] == "no result from POST-RUN: error:postrun (ValueError: a bug in building traces)", lost
    assert lost["failure_kind"] == "agent_run_error" and by_sample[1]["result"]["failure_kind"] is None
    assert left == {}
