"""Each call records the policy version that sampled it: the one the server reports (SGLang's
weight_version), else the one the operator set when generation resumed after a weight update."""

from __future__ import annotations

import httpx
import openai

from nemo_polar.bench.fake_upstream import FakeUpstreamThread

from ..conftest import make_proxy


def _call(proxy, stream: bool = False) -> str:
    session = proxy.proxy.sessions.open()
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key=session.api_key, max_retries=0)
    messages = [{"role": "user", "content": "hi"}]
    if stream:
        list(client.chat.completions.create(model="m", messages=messages, stream=True))
    else:
        client.chat.completions.create(model="m", messages=messages)
    proxy.proxy.store.flush()
    return session.id


def test_a_resume_names_the_weights_every_later_call_records(fake_upstream, tmp_path):
    with make_proxy(fake_upstream.url, tmp_path, upstream={"policy_version": "0"}) as p:
        before = _call(p)
        assert httpx.post(p.url + "/admin/inference/pause").json()["paused"] is True
        answer = httpx.post(p.url + "/admin/inference/resume", params={"policy_version": "7"}).json()
        assert answer["paused"] is False and answer["policy_version"] == "7"
        after = [_call(p), _call(p, stream=True)]
        assert [r.upstream.policy_version for r in p.proxy.store.records(before)] == ["0"]
        assert all(r.upstream.policy_version == "7" for s in after for r in p.proxy.store.records(s))


def test_the_version_the_server_reports_wins(tmp_path):
    with FakeUpstreamThread(engine="sglang", weight_version="step-12") as up:
        with make_proxy(up.url, tmp_path, upstream={"engine": "sglang", "policy_version": "3"}) as p:
            for stream in (False, True):
                (record,) = p.proxy.store.records(_call(p, stream))
                assert record.status == "ok" and record.upstream.policy_version == "step-12"
