"""A session's budget at the proxy: once its calls or sampled tokens are spent, every further call is a terminal 400
in the caller's dialect (never one a harness retries), and no call samples past what is left of it."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from nemo_polar.bench.fake_upstream import FakeUpstreamThread
from nemo_polar.bench.proxy import dialect_call
from tests.conftest import make_proxy, records

DIALECTS = ("openai_chat", "openai_responses", "anthropic", "gemini")


def _open(proxy, **budget) -> dict:
    return httpx.post(proxy.url + "/admin/sessions", json=budget, timeout=10).json()


def _call(proxy, dialect: str, key: str, tokens: int = 64) -> httpx.Response:
    path, body, headers = dialect_call(dialect, key, tokens, stream=False)
    return httpx.post(proxy.url + path, json=body, headers=headers, timeout=30)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_spent_call_budget_is_a_terminal_400_in_the_callers_dialect(proxy, dialect):
    opened = _open(proxy, max_calls=2)
    answers = [_call(proxy, dialect, opened["api_key"]) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 400]
    said = answers[2].text
    assert "session budget spent: 2 model calls (its budget: 2)" in said
    if dialect == "anthropic":
        assert answers[2].json()["type"] == "error" and answers[2].json()["error"]["type"] == "invalid_request_error"
    else:
        assert "message" in answers[2].json()["error"]
    assert len(proxy.proxy.records(opened["session_id"])) == 2  # the refused call reached nothing
    assert proxy.proxy.budget_spent(opened["session_id"]).startswith("session budget spent: 2 model calls")


def test_no_call_samples_past_the_token_budget(proxy, fake_upstream):
    opened = _open(proxy, max_sampled=20)  # the fake upstream samples 16 tokens unless asked for fewer
    first, second, third = (_call(proxy, "openai_chat", opened["api_key"]) for _ in range(3))
    assert (first.status_code, second.status_code, third.status_code) == (200, 200, 400)
    sampled = [len(r.completion_token_ids) for r in proxy.proxy.records(opened["session_id"])]
    assert sampled == [16, 4]  # the second call was capped at what was left
    assert "20 sampled tokens (its budget: 20)" in third.text


def test_a_session_without_a_budget_is_never_refused(proxy):
    opened = _open(proxy)
    assert {_call(proxy, "openai_chat", opened["api_key"]).status_code for _ in range(5)} == {200}
    assert proxy.proxy.budget_spent(opened["session_id"]) is None


# Parallel calls (sub-agents, side calls) all arrive while the others are in flight: the budget is charged before a
# call is forwarded, so none of them gets past it. The upstream is slow enough (20 ms a token) that every call of
# a burst is in flight at once.
BURST = 20


def _burst(url: str, dialect: str, key: str, n: int, stream: bool, tokens: int = 16) -> list[tuple[int, str]]:
    """n calls of one session fired at once: (status, body) of each."""

    async def one(client: httpx.AsyncClient) -> tuple[int, str]:
        path, body, headers = dialect_call(dialect, key, tokens, stream=stream)
        r = await client.post(url + path, json=body, headers=headers)
        return r.status_code, r.text

    async def fire() -> list[tuple[int, str]]:
        async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=n)) as client:
            return await asyncio.gather(*(one(client) for _ in range(n)))

    return asyncio.run(fire())


@pytest.fixture
def slow_upstream():
    with FakeUpstreamThread(token_delay_s=0.02) as up:
        yield up


@pytest.fixture
def slow_proxy(slow_upstream, tmp_path):
    with make_proxy(slow_upstream.url, tmp_path) as p:
        yield p


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_call_budget_holds_when_every_call_arrives_at_once(slow_proxy, slow_upstream, dialect, stream):
    opened = _open(slow_proxy, max_calls=5)
    answers = _burst(slow_proxy.url, dialect, opened["api_key"], BURST, stream)
    statuses = sorted(status for status, _ in answers)
    assert statuses == [200] * 5 + [400] * (BURST - 5), statuses
    assert len(slow_upstream.fake.requests) == 5  # what the inference server was asked to sample
    assert len(records(slow_proxy, opened["session_id"])) == 5
    refused = [text for status, text in answers if status == 400]
    assert all("session budget spent: 5 model calls" in text and "(its budget: 5)" in text for text in refused)
    assert slow_proxy.proxy.budget_spent(opened["session_id"]).startswith("session budget spent: 5 model calls")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_token_budget_holds_when_every_call_arrives_at_once(slow_proxy, slow_upstream, dialect, stream):
    opened = _open(slow_proxy, max_sampled=40)  # each call asks for 16: two whole, one capped at 8
    answers = _burst(slow_proxy.url, dialect, opened["api_key"], BURST, stream)
    sampled = [len(r.completion_token_ids) for r in records(slow_proxy, opened["session_id"])]
    assert sum(sampled) == 40 and sorted(sampled) == [8, 16, 16], sampled
    assert sorted(s for s, _ in answers) == [200] * 3 + [400] * (BURST - 3)
    assert sorted(r.get("max_tokens") for r in slow_upstream.fake.requests) == [8, 16, 16]
    assert all("40 sampled tokens (its budget: 40)" in text for status, text in answers if status == 400)


def test_what_a_call_held_but_did_not_sample_goes_to_the_calls_waiting(tmp_path):
    """Calls ask for 16 tokens and sample 4: the 12 each gives back let the calls that waited for them go on, until
    the budget is sampled in full, never past it."""
    with FakeUpstreamThread(tokens=4, token_delay_s=0.02) as upstream, make_proxy(upstream.url, tmp_path) as proxy:
        opened = _open(proxy, max_sampled=22)
        answers = _burst(proxy.url, "openai_chat", opened["api_key"], BURST, stream=False)
        sampled = [len(r.completion_token_ids) for r in records(proxy, opened["session_id"])]
        assert sum(sampled) == 22 and sampled.count(4) == 5 and sampled.count(2) == 1, sampled
        assert sorted(s for s, _ in answers) == [200] * 6 + [400] * (BURST - 6)


def test_a_budget_holds_across_a_proxy_restart(fake_upstream, tmp_path):
    """The calls recorded before a restart count after it: a session with 3 of its 5 calls spent gets 2 more, however
    many arrive at once."""
    with make_proxy(fake_upstream.url, tmp_path) as proxy:
        opened = _open(proxy, max_calls=5, max_sampled=1000)
        assert [_call(proxy, "anthropic", opened["api_key"]).status_code for _ in range(3)] == [200] * 3
    with make_proxy(fake_upstream.url, tmp_path) as proxy:
        before = len(fake_upstream.fake.requests)
        answers = _burst(proxy.url, "gemini", opened["api_key"], 10, stream=True)
        assert sorted(s for s, _ in answers) == [200] * 2 + [400] * 8
        assert len(fake_upstream.fake.requests) - before == 2
        assert len(records(proxy, opened["session_id"])) == 5
