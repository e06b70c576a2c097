"""Every harness CLI's real requests, sent again through the proxy to the fake upstream, byte for byte, in the
dialect and streaming mode the CLI used (`tests/harness_calls.py` keeps them): each is answered in its dialect,
and recorded with token ids and the body exactly as sent."""

from __future__ import annotations

import json

import httpx
import pytest

from nemo_polar.bench.fake_upstream import FakeUpstreamThread
from nemo_polar.harnesses import HARNESSES
from tests.conftest import make_proxy, records
from tests.harness_calls import captures

from .dialect_cases import CASES

CAPTURES = captures()
DIALECTS = {c.dialect: c for c in CASES}
# the events that end a stream in each dialect (Gemini's streams end with the candidate's finishReason; the
# fake upstream stops at its token count, so a Responses stream ends incomplete)
LAST_EVENT = {
    "openai_chat": ("data: [DONE]",),
    "openai_responses": ("event: response.completed", "event: response.incomplete"),
    "anthropic": ("event: message_stop",),
    "gemini": ('"finishReason"',),
}


@pytest.fixture(scope="module")
def proxy(tmp_path_factory):
    with FakeUpstreamThread() as up, make_proxy(up.url, tmp_path_factory.mktemp("replay")) as p:
        yield p


def test_every_harness_has_its_requests_kept():
    """A built-in harness with a CLI of its own (every one but shell) has a capture of its real requests."""
    kept = {c["harness"].split("-")[0] for c in CAPTURES.values()}
    missing = sorted(name for name, cls in HARNESSES.items() if cls.pin is not None and name not in kept)
    assert not missing, f"no captured requests for {missing}: run their capture tests"


@pytest.mark.parametrize("name", list(CAPTURES))
def test_a_harnesss_real_requests_are_answered_and_recorded_as_sent(name, proxy):
    capture = CAPTURES[name]
    assert capture["calls"], f"{name}: an empty capture"
    session = proxy.proxy.sessions.open()
    for call in capture["calls"]:
        case, stream, body = DIALECTS[call["dialect"]], call["stream"], call["body"]
        r = httpx.post(proxy.url + case.path(stream), json=body, headers=case.headers(session.api_key), timeout=30)
        assert r.status_code == 200, (name, r.text[:500])
        if stream:
            assert r.headers["content-type"].startswith("text/event-stream")
            assert any(event in r.text for event in LAST_EVENT[call["dialect"]]), (name, r.text[-500:])
        else:
            json.loads(r.text)
    recs = records(proxy, session.id)
    assert len(recs) == len(capture["calls"])
    for rec, call in zip(recs, capture["calls"], strict=True):
        assert rec.status == "ok", (name, rec.error)
        assert (rec.dialect, rec.stream) == (call["dialect"], call["stream"])
        assert rec.native_request == call["body"], f"{name}: the body was not recorded as sent"
        assert rec.prompt_token_ids and rec.completion_token_ids
        assert len(rec.completion_logprobs) == len(rec.completion_token_ids)
