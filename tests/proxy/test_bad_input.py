"""Bad input in every dialect: a 4xx with a clear message in the dialect's shape, nothing recorded."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import make_proxy

from .dialect_cases import CASES, IDS


@pytest.fixture
def small_proxy(fake_upstream, tmp_path):
    with make_proxy(fake_upstream.url, tmp_path, limits={"max_body_bytes": 4096}) as p:
        yield p


def _nothing_recorded(proxy, fake_upstream) -> None:
    proxy.proxy.store.flush()
    assert proxy.proxy.store.records() == []
    assert httpx.get(fake_upstream.url + "/_requests").json() == []  # nothing was forwarded either


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_bad_input_is_a_clear_4xx_in_the_dialect_and_not_recorded(case, small_proxy, fake_upstream):
    proxy = small_proxy
    key = proxy.proxy.sessions.open().api_key
    url, headers = proxy.url + case.path(False), case.headers(key)
    wrong_types = case.body("x", False)
    wrong_types[next(iter(k for k in wrong_types if k in ("messages", "input", "contents")))] = 42
    checks = [
        (httpx.post(url, content=b"{not json", headers=headers), 400, "not valid JSON"),
        (httpx.post(url, json=wrong_types, headers=headers), 400, ""),
        (httpx.post(url, json=["a list"], headers=headers), 400, ""),
        (httpx.post(url, json=case.body("x" * 10_000, False), headers=headers), 413, "limit"),
        (httpx.post(url, json=case.body("x", False), headers=case.headers("sk-polar-unknown")), 401, "API key"),
        (httpx.post(url, json=case.body("x", False), headers={"content-type": "application/json"}), 401, "API key"),
    ]
    for response, status, words in checks:
        assert response.status_code == status, response.text
        message = case.error_message(response.json())
        assert message and words in message, response.text
    _nothing_recorded(proxy, fake_upstream)


@pytest.mark.parametrize(
    "path,dialect",
    [
        ("/v1/nowhere", "openai_chat"),
        ("/v1/messages/batches", "anthropic"),
        ("/v1beta/models/m:countTokens", "gemini"),
    ],
)
def test_unknown_path_is_404_in_the_dialect_it_looks_like(path, dialect, proxy, fake_upstream):
    case = next(c for c in CASES if c.dialect == dialect)
    r = httpx.post(proxy.url + path, json={}, headers=case.headers("sk-polar-x"))
    assert r.status_code == 404
    assert path in case.error_message(r.json())
    _nothing_recorded(proxy, fake_upstream)


def test_probes_harnesses_send_are_answered(proxy):
    assert httpx.head(proxy.url + "/").status_code == 200
    models = httpx.get(proxy.url + "/v1/models").json()
    assert models["data"][0]["id"] == "fake-policy"  # the name the upstream serves
