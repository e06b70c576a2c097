"""OpenAI Chat Completions through the proxy, checked with the official SDK (it parses our SSE)."""

from __future__ import annotations

import openai
import pytest

from tests.conftest import records


def client(proxy, session) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.url + "/v1", api_key=session["api_key"], max_retries=0)


def test_non_streaming_call_is_answered_and_recorded(proxy, session):
    out = client(proxy, session).chat.completions.create(
        model="any-name", messages=[{"role": "user", "content": "hello"}], max_tokens=5
    )
    assert out.model == "any-name"
    assert out.choices[0].message.content == "w0 w1 w2 w3 w4"
    assert out.choices[0].finish_reason == "length"
    (rec,) = records(proxy, session["session_id"])
    assert rec.status == "ok" and rec.dialect == "openai_chat" and not rec.stream
    assert rec.completion_token_ids == [1000, 1001, 1002, 1003, 1004]
    assert len(rec.completion_logprobs) == 5 and rec.prompt_token_ids
    assert rec.upstream_request["return_token_ids"] is True and rec.upstream_request["top_logprobs"] == 0


def test_streaming_relays_every_token_and_usage(proxy, session):
    stream = client(proxy, session).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        max_completion_tokens=4,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "w0 w1 w2 w3"
    assert chunks[-1].usage.completion_tokens == 4 and chunks[-1].choices == []
    (rec,) = records(proxy, session["session_id"])
    assert rec.stream and rec.completion_token_ids == [1000, 1001, 1002, 1003]
    assert rec.first_token_at is not None and rec.first_token_at <= rec.finished_at


@pytest.mark.parametrize("stream", [False, True])
def test_tool_calls_round_trip(proxy, session, stream):
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
    messages = [{"role": "user", "content": "[fault:tool_call] list files"}]
    c = client(proxy, session)
    if stream:
        chunks = list(c.chat.completions.create(model="m", messages=messages, tools=tools, stream=True))
        calls = [tc for ch in chunks if ch.choices for tc in ch.choices[0].delta.tool_calls or []]
        assert calls[0].function.name == "bash" and calls[0].id == "call_fake"
        assert "".join(tc.function.arguments or "" for tc in calls) == '{"command": "ls"}'
    else:
        out = c.chat.completions.create(model="m", messages=messages, tools=tools)
        assert out.choices[0].finish_reason == "tool_calls"
        assert out.choices[0].message.tool_calls[0].function.arguments == '{"command": "ls"}'
    (rec,) = records(proxy, session["session_id"])
    assert rec.message["tool_calls"][0]["name"] == "bash"
    # the tool message with list content, as Qwen Code sends it, goes through too
    follow = messages + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_fake", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_fake", "content": [{"type": "text", "text": "a.py"}]},
    ]
    c.chat.completions.create(model="m", messages=follow, tools=tools)
    assert [r.seq for r in records(proxy, session["session_id"])] == [0, 1]


def test_unknown_key_is_401_in_openai_shape_and_not_recorded(proxy, session):
    bad = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-polar-nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as exc:
        bad.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert "unknown or missing API key" in exc.value.body["message"]
    assert records(proxy, session["session_id"]) == []
