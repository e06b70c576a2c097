"""`GET /metrics` on the proxy, a gateway node and the rollout server, scraped and parsed as Prometheus
does: after a run the counters equal what the stores hold."""

from __future__ import annotations

import time
from collections import Counter

import httpx
import openai
from prometheus_client.parser import text_string_to_metric_families

from nemo_polar.config import ProxyConfig
from nemo_polar.proxy.app import Proxy
from nemo_polar.proxy.serve import free_port
from nemo_polar.server.gateway.node import GatewayNode, NodeConfig, NodeThread
from nemo_polar.server.rollout import RolloutConfig, RolloutThread

from .conftest import make_proxy


def scrape(url: str) -> dict[str, list]:
    """Each sample by name: [(labels, value), ...]."""
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(httpx.get(url + "/metrics", timeout=10).text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


def test_the_proxys_counters_equal_its_records(fake_upstream, tmp_path):
    with make_proxy(fake_upstream.url, tmp_path) as p:
        session = p.proxy.sessions.open()
        client = openai.OpenAI(base_url=p.url + "/v1", api_key=session.api_key, max_retries=0)
        for text in ("hi", "again", "[fault:http500]"):
            try:
                client.chat.completions.create(model="m", messages=[{"role": "user", "content": text}])
            except openai.APIError:
                pass
        list(client.chat.completions.create(model="m", messages=[{"role": "user", "content": "s"}], stream=True))
        anthropic = httpx.post(
            p.url + "/v1/messages",
            headers={"x-api-key": session.api_key},
            json={"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "yo"}]},
        )
        assert anthropic.status_code == 200
        p.proxy.store.flush()
        records = p.proxy.store.records(session.id)
        metrics = scrape(p.url)
    counted = {(s["dialect"], s["status"]): v for s, v in metrics["polar_proxy_calls_total"]}
    assert counted == dict(Counter((r.dialect, r.status) for r in records))
    assert counted[("openai_chat", "upstream_error")] == 1 and counted[("anthropic", "ok")] == 1
    assert metrics["polar_proxy_completion_tokens_total"][0][1] == sum(len(r.completion_token_ids) for r in records)
    assert metrics["polar_proxy_prompt_tokens_total"][0][1] == sum(len(r.prompt_token_ids) for r in records)
    first_token = dict((s.get("le"), v) for s, v in metrics["polar_proxy_time_to_first_token_seconds_bucket"])
    assert first_token["+Inf"] == 1  # the one streamed call
    # every call the upstream answered: the whole ones, the failed one and the streamed one
    assert metrics["polar_proxy_added_latency_seconds_count"][0][1] == 4
    assert metrics["polar_proxy_inflight_calls"][0][1] == 0
    assert 0 < metrics["polar_proxy_upstream_busy_fraction"][0][1] <= 1


def test_a_node_and_the_rollout_server_count_what_their_stores_hold(fake_upstream, tmp_path):
    command = "python3 -c \"print('done')\""
    with RolloutThread(RolloutConfig(port=0, store={"path": str(tmp_path / "rollout.sqlite")})) as rollout:
        port = free_port()
        proxy = Proxy(ProxyConfig.model_validate({"port": port, "store": {"path": str(tmp_path / "r.sqlite")}}))
        node_cfg = NodeConfig(
            node_id="n1", rollout_url=rollout.url, public_url=f"http://127.0.0.1:{port}", root=str(tmp_path / "node")
        )
        with NodeThread(GatewayNode(node_cfg, proxy), "127.0.0.1", port):
            task = {
                "task_id": "t1",
                "instruction": "hi",
                "num_samples": 3,
                "harness": {"name": "shell", "command": command},
            }
            assert httpx.post(rollout.url + "/tasks", json=task).status_code == 201
            deadline = time.monotonic() + 60
            while httpx.get(rollout.url + "/tasks/t1").json()["status"] == "running" and time.monotonic() < deadline:
                time.sleep(0.2)
            served = scrape(rollout.url)
            node = scrape(f"http://127.0.0.1:{port}")
        proxy.store.close()
    sessions = {s["state"]: v for s, v in served["polar_rollout_sessions"]}
    assert sessions == {"completed": 3}
    assert served["polar_rollout_queue_depth"][0][1] == 0
    assert served["polar_rollout_dispatch_latency_seconds_count"][0][1] == 3
    assert {s["healthy"]: v for s, v in served["polar_rollout_nodes"]} == {"true": 1, "false": 0}
    assert {v for _, v in node["polar_node_pool_sessions"]} == {0}  # every pool empty after the run
    assert node["polar_node_outbox_results"][0][1] == 0  # every result acknowledged
    assert "polar_proxy_calls_total" in node or "polar_proxy_calls_created" not in node  # the node shows its proxy's
    assert "polar_proxy_inflight_calls" in node
