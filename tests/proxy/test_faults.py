"""Upstream failures in every dialect: the harness gets an error in its own shape, the call is
recorded with a failure status, and the proxy keeps serving other sessions."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import make_proxy, records

from .dialect_cases import CASES, IDS

FAULTS = {  # fault -> (HTTP status the harness sees when not streaming, record status)
    "http500": (502, "upstream_error"),
    "reset": (502, "upstream_error"),
    "timeout": (504, "timeout"),
    "no_token_ids": (502, "invalid_upstream"),
    "http400_overflow": (400, "context_overflow"),
}


@pytest.fixture
def fast_timeout_proxy(fake_upstream, tmp_path):
    with make_proxy(fake_upstream.url, tmp_path, upstream={"timeout_s": 1.0}) as p:
        yield p


def _healthy_call(proxy, case) -> None:
    other = proxy.proxy.sessions.open()
    r = httpx.post(proxy.url + case.path(False), json=case.body("hello", False), headers=case.headers(other.api_key))
    assert r.status_code == 200, r.text
    assert [rec.status for rec in records(proxy, other.id)] == ["ok"]


@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_upstream_fault_is_an_error_in_the_dialect_and_recorded(case, fault, fast_timeout_proxy):
    proxy = fast_timeout_proxy
    session = proxy.proxy.sessions.open()
    status, record_status = FAULTS[fault]
    r = httpx.post(
        proxy.url + case.path(False),
        json=case.body(f"[fault:{fault}] hi", False),
        headers=case.headers(session.api_key),
        timeout=10,
    )
    assert r.status_code == status, r.text
    assert case.error_message(r.json())
    (rec,) = records(proxy, session.id)
    assert rec.status == record_status and rec.error and rec.completion_token_ids == []
    _healthy_call(proxy, case)


@pytest.mark.parametrize("fault", ["cut", "no_token_ids"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_stream_failure_after_it_started_is_signalled_and_recorded(case, fault, proxy):
    session = proxy.proxy.sessions.open()
    with httpx.stream(
        "POST",
        proxy.url + case.path(True),
        json=case.body(f"[fault:{fault}] hi", True),
        headers=case.headers(session.api_key),
        timeout=10,
    ) as r:
        assert r.status_code == 200
        text = r.read().decode()
    assert "error" in text.lower() or "failed" in text  # each dialect's in-stream error event
    (rec,) = records(proxy, session.id)
    assert rec.status in ("upstream_error", "invalid_upstream") and rec.error
    _healthy_call(proxy, case)
