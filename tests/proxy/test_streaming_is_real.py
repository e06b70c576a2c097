"""Streaming is relayed token by token: the harness's first chunk arrives while the upstream is
still generating, not once it has finished."""

from __future__ import annotations

import time

import httpx
import pytest

from nemo_polar.bench.fake_upstream import FakeUpstreamThread
from tests.conftest import make_proxy, records

from .dialect_cases import CASES, IDS

TOKENS, DELAY = 6, 0.25  # the upstream needs about 1.5 s for the whole answer


@pytest.fixture(scope="module")
def slow_proxy(tmp_path_factory):
    with FakeUpstreamThread(tokens=TOKENS, token_delay_s=DELAY) as up:
        with make_proxy(up.url, tmp_path_factory.mktemp("slow")) as p:
            yield p


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_first_chunk_arrives_before_the_upstream_finishes(case, slow_proxy):
    session = slow_proxy.proxy.sessions.open()
    t0 = time.perf_counter()
    arrivals = []
    with httpx.stream(
        "POST",
        slow_proxy.url + case.path(True),
        json=case.body("hi", True),
        headers=case.headers(session.api_key),
        timeout=10,
    ) as r:
        assert r.status_code == 200
        for chunk in r.iter_raw():
            if chunk.strip():
                arrivals.append(time.perf_counter() - t0)
    total = arrivals[-1]
    text_chunks = [t for t in arrivals if t > 0]
    assert total >= TOKENS * DELAY * 0.9, "the upstream cannot have finished sooner"
    assert text_chunks[0] < 2 * DELAY, f"first chunk after {text_chunks[0]:.2f}s of {total:.2f}s"
    assert len(arrivals) >= TOKENS // 2, "tokens were batched instead of relayed"
    (rec,) = records(slow_proxy, session.id)
    assert rec.status == "ok" and rec.first_token_at - rec.started_at < 2 * DELAY


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_harness_that_leaves_mid_stream_is_recorded_and_releases_its_slot(case, slow_proxy):
    session = slow_proxy.proxy.sessions.open()
    t0 = time.perf_counter()
    with httpx.stream(
        "POST",
        slow_proxy.url + case.path(True),
        json=case.body("hi", True),
        headers=case.headers(session.api_key),
        timeout=10,
    ) as r:
        for chunk in r.iter_raw():
            if chunk.strip():
                break  # hang up after the first event
    recs = []
    while not recs and time.perf_counter() - t0 < 5:
        time.sleep(0.05)
        recs = records(slow_proxy, session.id)
    (rec,) = recs
    assert rec.status == "client_disconnected"
    assert rec.finished_at - rec.started_at < TOKENS * DELAY * 0.8, "the relay ran on after the harness left"
    assert slow_proxy.proxy.gate.status()["inflight"] == 0
