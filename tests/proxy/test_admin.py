"""Capture-only sessions, reading records back, the control token, pause and resume."""

from __future__ import annotations

import threading
import time

import httpx
import openai

from tests.conftest import make_proxy

TOKEN = {"x-polar-control-token": "s3cret"}


def test_sessions_and_records_over_http_with_a_control_token(fake_upstream, tmp_path):
    with make_proxy(fake_upstream.url, tmp_path, control_token="s3cret") as p:
        assert httpx.post(p.url + "/admin/sessions", json={}).status_code == 401
        assert (
            httpx.post(p.url + "/admin/sessions", json={}, headers={"x-polar-control-token": "no"}).status_code == 401
        )
        assert httpx.post(p.url + "/admin/sessions", json=[1], headers=TOKEN).status_code == 400
        opened = httpx.post(p.url + "/admin/sessions", json={"metadata": {"task": "t1"}}, headers=TOKEN)
        assert opened.status_code == 201
        s = opened.json()
        assert s["api_key"].startswith("sk-polar-")
        client = openai.OpenAI(base_url=p.url + "/v1", api_key=s["api_key"], max_retries=0)
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
        got = httpx.get(f"{p.url}/admin/sessions/{s['session_id']}/completions", headers=TOKEN).json()["data"]
        assert len(got) == 1 and got[0]["completion_token_ids"] == [1000, 1001]
        assert httpx.get(f"{p.url}/admin/sessions/{s['session_id']}/completions").status_code == 401


def test_a_restarted_proxy_knows_its_keys_and_continues_numbering(fake_upstream, tmp_path):
    with make_proxy(fake_upstream.url, tmp_path) as p:
        s = p.proxy.sessions.open()
        openai.OpenAI(base_url=p.url + "/v1", api_key=s.api_key).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
    with make_proxy(fake_upstream.url, tmp_path) as p:
        openai.OpenAI(base_url=p.url + "/v1", api_key=s.api_key).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "again"}]
        )
        p.proxy.store.flush()
        assert [r.seq for r in p.proxy.store.records(s.id)] == [0, 1]


def test_pause_drains_and_holds_new_calls_until_resume(tmp_path):
    from nemo_polar.bench.fake_upstream import FakeUpstreamThread

    with FakeUpstreamThread() as up, make_proxy(up.url, tmp_path) as p:
        key = p.proxy.sessions.open().api_key
        client = openai.OpenAI(base_url=p.url + "/v1", api_key=key, max_retries=0)
        slow = threading.Thread(
            target=lambda: client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "[fault:slow]"}]
            )
        )
        slow.start()
        time.sleep(0.2)
        t0 = time.perf_counter()
        paused = httpx.post(p.url + "/admin/inference/pause?timeout_seconds=5", timeout=10).json()
        assert paused == {"paused": True, "inflight": 0} and time.perf_counter() - t0 > 0.5  # waited for the slow call
        done = []
        held = threading.Thread(
            target=lambda: done.append(
                client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
            )
        )
        held.start()
        time.sleep(0.3)
        assert not done and httpx.get(p.url + "/admin/inference/status").json()["paused"]
        httpx.post(p.url + "/admin/inference/resume")
        held.join(5)
        assert done and done[0].choices[0].message.content
        slow.join(5)


def test_a_session_opened_with_its_own_upstream_is_sent_there(fake_upstream, tmp_path):
    """A task may name its inference server (NeMo-RL's vLLM, known at run time): that session's calls
    go there, streaming or not, and its records say so; other sessions keep the proxy's upstream."""
    from nemo_polar.bench.fake_upstream import FakeUpstreamThread

    with FakeUpstreamThread() as other, make_proxy(fake_upstream.url, tmp_path) as p:
        mine = p.proxy.sessions.open(upstream_url=other.url + "/v1")
        plain = p.proxy.sessions.open()
        for key in (mine.api_key, plain.api_key):
            client = openai.OpenAI(base_url=p.url + "/v1", api_key=key, max_retries=0)
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
            list(client.chat.completions.create(model="m", messages=[{"role": "user", "content": "s"}], stream=True))
        p.proxy.store.flush()
        assert {r.upstream.url for r in p.proxy.store.records(mine.id)} == {other.url}
        assert {r.upstream.url for r in p.proxy.store.records(plain.id)} == {fake_upstream.url}
        assert len(other.fake.requests) == 2 and len(fake_upstream.fake.requests) == 2
