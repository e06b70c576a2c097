"""A session's budget at the proxy: once its calls or sampled tokens are spent, every further call is a terminal 400
in the caller's dialect (never one a harness retries), and no call samples past what is left of it."""

from __future__ import annotations

import httpx
import pytest

from nemo_polar.bench.proxy import dialect_call

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
