"""Anthropic Messages through the proxy, checked with the official SDK (it parses and accumulates our SSE)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import anthropic
import orjson
import pytest
from aiohttp import web

from nemo_polar.bench.fake_upstream import FakeUpstream, FakeUpstreamThread
from nemo_polar.chat import ChatRequest, Completion, Delta, ToolCall, ToolCallDelta
from nemo_polar.errors import BodyTooLarge, ContextOverflow, Paused, UnknownRoute, UpstreamError, UpstreamTimeout
from nemo_polar.proxy.dialects.anthropic import RAW_ARGUMENTS, Anthropic, signature
from tests.conftest import make_proxy, records, squeezed

BASH = {
    "name": "bash",
    "description": "run a command",
    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
}


def client(proxy, session) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=proxy.url, api_key=session["api_key"], max_retries=0)


def test_non_streaming_text_is_answered_and_recorded(proxy, session):
    out = client(proxy, session).messages.create(
        model="claude-any",
        max_tokens=5,
        system="be brief",
        messages=[{"role": "user", "content": "hello"}],
    )
    assert out.model == "claude-any" and out.id.startswith("msg_") and out.role == "assistant"
    assert [b.type for b in out.content] == ["text"] and out.content[0].text == "w0 w1 w2 w3 w4"
    assert out.stop_reason == "max_tokens" and out.stop_sequence is None
    assert out.usage.output_tokens == 5 and out.usage.input_tokens > 0 and out.usage.cache_read_input_tokens == 0
    (rec,) = records(proxy, session["session_id"])
    assert rec.status == "ok" and rec.dialect == "anthropic" and not rec.stream
    assert rec.completion_token_ids == [1000, 1001, 1002, 1003, 1004] and rec.prompt_token_ids
    assert rec.upstream_request["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello"},
    ]
    assert rec.upstream_request["max_tokens"] == 5


def test_streaming_sends_the_exact_event_sequence(proxy, session):
    events = list(
        client(proxy, session).messages.create(
            model="m",
            max_tokens=4,
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
        )
    )
    kinds = [e.type for e in events]
    # the tokens one read of the upstream brought are one delta (`chat.merged`): one or more deltas
    assert squeezed(kinds) == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[0].message.content == [] and events[0].message.usage.output_tokens == 0
    assert "".join(e.delta.text for e in events if e.type == "content_block_delta") == "w0 w1 w2 w3"
    assert events[-2].delta.stop_reason == "max_tokens" and events[-2].usage.output_tokens == 4
    (rec,) = records(proxy, session["session_id"])
    assert rec.stream and rec.status == "ok" and rec.completion_token_ids == [1000, 1001, 1002, 1003]
    assert rec.first_token_at is not None and rec.first_token_at <= rec.finished_at


def test_stream_helper_builds_the_final_message(proxy, session):
    with client(proxy, session).messages.stream(
        model="m",
        max_tokens=3,
        messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "w0 w1 w2" and final.content[0].text == "w0 w1 w2"
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 3 and final.usage.input_tokens > 0


@pytest.mark.parametrize("stream", [False, True])
def test_tool_use_round_trip(proxy, session, stream):
    c = client(proxy, session)
    messages = [{"role": "user", "content": "[fault:tool_call] list files"}]
    if stream:
        with c.messages.stream(model="m", max_tokens=50, tools=[BASH], messages=messages) as s:
            out = s.get_final_message()
    else:
        out = c.messages.create(model="m", max_tokens=50, tools=[BASH], messages=messages)
    (call,) = [b for b in out.content if b.type == "tool_use"]
    assert call.id == "call_fake" and call.name == "bash" and call.input == {"command": "ls"}
    assert out.stop_reason == "tool_use"
    follow = messages + [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in out.content]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_fake", "content": "a.py"},
                {"type": "text", "text": "now explain"},
            ],
        },
    ]
    again = c.messages.create(model="m", max_tokens=2, tools=[BASH], messages=follow)
    assert again.stop_reason == "tool_use"  # the fake engine keeps calling while its marker is in history
    first, second = records(proxy, session["session_id"])
    assert first.message["tool_calls"][0]["name"] == "bash"
    sent = second.upstream_request["messages"]
    assert sent[1]["tool_calls"][0]["function"] == {"name": "bash", "arguments": '{"command":"ls"}'}
    assert sent[2] == {"role": "tool", "content": "a.py", "tool_call_id": "call_fake"}
    assert sent[3] == {"role": "user", "content": [{"type": "text", "text": "now explain"}]}


# --- thinking: an upstream that reasons before it answers ---------------------------------------
class ThinkingUpstream(FakeUpstream):
    """The fake engine, answering like a reasoning model: reasoning, then text, token fields included."""

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        self.requests.append(body)
        pieces = [{"reasoning_content": "let me"}, {"reasoning_content": " think"}, {"content": "done"}]
        head = {"id": "fake-2", "created": int(time.time()), "model": body.get("model"), "prompt_token_ids": [7, 8, 9]}
        if not body.get("stream"):
            message = {"role": "assistant", "reasoning_content": "let me think", "content": "done"}
            choice = {
                "index": 0,
                "message": message,
                "finish_reason": "stop",
                "token_ids": [1, 2, 3],
                "logprobs": {"content": [{"logprob": -0.5}] * 3},
            }
            return web.Response(body=orjson.dumps(head | {"choices": [choice]}), content_type="application/json")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i, delta in enumerate(pieces):
            choice = {"index": 0, "delta": delta, "token_ids": [i + 1], "logprobs": {"content": [{"logprob": -0.5}]}}
            await resp.write(b"data: " + orjson.dumps(head | {"choices": [choice]}) + b"\n\n")
        end = {"index": 0, "delta": {}, "finish_reason": "stop"}
        await resp.write(b"data: " + orjson.dumps(head | {"choices": [end]}) + b"\n\ndata: [DONE]\n\n")
        return resp


@pytest.fixture
def thinking_proxy(tmp_path) -> Iterator:
    up = FakeUpstreamThread()
    up.fake = ThinkingUpstream()
    with up, make_proxy(up.url, tmp_path) as p:
        yield p


@pytest.mark.parametrize("stream", [False, True])
def test_thinking_round_trip(thinking_proxy, stream):
    s = thinking_proxy.proxy.sessions.open()
    c = client(thinking_proxy, {"api_key": s.api_key})
    ask = {
        "model": "m",
        "max_tokens": 50,
        "thinking": {"type": "enabled", "budget_tokens": 20},
        "messages": [{"role": "user", "content": "why?"}],
    }
    if stream:
        with c.messages.stream(**ask) as st:
            kinds = [
                (e.type, getattr(e, "delta", None) and e.delta.type) for e in st if e.type.startswith("content_block")
            ]
            out = st.get_final_message()
        assert squeezed(kinds)[:3] == [  # one thinking delta per read of the upstream, then its signature
            ("content_block_start", None),
            ("content_block_delta", "thinking_delta"),
            ("content_block_delta", "signature_delta"),
        ]
    else:
        out = c.messages.create(**ask)
    thinking, text = out.content
    assert thinking.type == "thinking" and thinking.thinking == "let me think"
    assert thinking.signature == signature("let me think") and thinking.signature.startswith("polar:")
    assert text.text == "done" and out.stop_reason == "end_turn"
    history = ask["messages"] + [
        {"role": "assistant", "content": [b.model_dump() for b in out.content]},
        {"role": "user", "content": "and then?"},
    ]
    c.messages.create(**(ask | {"messages": history, "thinking": {"type": "disabled"}}))
    first, second = records(thinking_proxy, s.id)
    assert first.upstream_request["chat_template_kwargs"] == {"enable_thinking": True}
    assert first.message["reasoning"] == "let me think"
    assert second.upstream_request["chat_template_kwargs"] == {"enable_thinking": False}
    assert second.upstream_request["messages"][1] == {
        "role": "assistant",
        "content": "done",
        "reasoning": "let me think",
    }


# --- what Claude Code and Pi send ---------------------------------------------------------------
def claude_code_body() -> dict:
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 32000,
        "stream": True,
        "system": [
            {
                "type": "text",
                "text": "x-anthropic-billing-header: cc_version=2.1.197.a1b; cc_entrypoint=sdk-cli; cch=9f3e1;",
            },
            {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Be careful.", "cache_control": {"type": "ephemeral"}},
        ],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "<system-reminder>ctx</system-reminder>"},
                    {"type": "text", "text": "fix the bug"},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "look first", "signature": "polar:abc="},
                    {"type": "redacted_thinking", "data": "opaque"},
                    {"type": "text", "text": "Let me look."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "Bash",
                        "input": {"command": "cat x.py", "timeout": 5},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": "No such file",
                        "is_error": True,
                        "cache_control": {"type": "ephemeral"},
                    }
                ],
            },
            {"role": "system", "content": "The user changed the working directory."},
            {"role": "user", "content": [{"type": "text", "text": "go on", "cache_control": {"type": "ephemeral"}}]},
        ],
        "tools": [
            {"name": "Bash", "description": "run", "input_schema": BASH["input_schema"]},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
        ],
        "metadata": {"user_id": '{"device_id":"d","session_id":"s"}'},
        "thinking": {"type": "adaptive"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "high"},
    }


def test_claude_code_request_is_accepted_and_translated(proxy, session):
    body = claude_code_body()
    body.pop("stream")
    betas = [
        "claude-code-20250219",
        "interleaved-thinking-2025-05-14",
        "context-management-2025-06-27",
        "mid-conversation-system-2026-04-07",
    ]
    with client(proxy, session).beta.messages.stream(**body, betas=betas, extra_query={"beta": "true"}) as st:
        out = st.get_final_message()
    assert out.content[0].text.startswith("w0")
    (rec,) = records(proxy, session["session_id"])
    assert rec.status == "ok" and rec.stream
    assert rec.native_request["system"][0]["text"].startswith("x-anthropic-billing-header:")  # kept as sent
    assert rec.native_request["messages"][3]["role"] == "system" and rec.native_request["context_management"]
    up = rec.upstream_request
    assert [m["role"] for m in up["messages"]] == ["system", "user", "assistant", "tool", "system", "user"]
    system, user, assistant, tool, mid, last = up["messages"]
    assert system["content"] == "You are Claude Code.\n\nBe careful."  # billing header stripped
    assert user["content"] == [
        {"type": "text", "text": "<system-reminder>ctx</system-reminder>"},
        {"type": "text", "text": "fix the bug"},
    ]
    assert assistant == {
        "role": "assistant",
        "content": "Let me look.",
        "reasoning": "look first",
        "tool_calls": [
            {
                "id": "toolu_1",
                "type": "function",
                "function": {"name": "Bash", "arguments": '{"command":"cat x.py","timeout":5}'},
            }
        ],
    }
    assert tool["tool_call_id"] == "toolu_1" and tool["content"].startswith("[tool error] No such file")
    assert mid == {"role": "system", "content": "The user changed the working directory."}
    assert last["content"] == [{"type": "text", "text": "go on"}]  # cache_control is not forwarded
    assert [t["function"]["name"] for t in up["tools"]] == ["Bash"]  # the server tool is dropped
    assert up["chat_template_kwargs"] == {"enable_thinking": True} and up["max_tokens"] == 32000
    assert not {"metadata", "context_management", "output_config", "thinking"} & set(up)


def test_billing_header_does_not_change_the_prompt_across_turns(proxy, session):
    c = client(proxy, session)
    for cch in ("aaaa", "bbbb"):
        system = [
            {"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.197; cch={cch};"},
            {"type": "text", "text": "You are Claude Code."},
        ]
        c.messages.create(model="m", max_tokens=2, system=system, messages=[{"role": "user", "content": "hi"}])
    first, second = records(proxy, session["session_id"])
    assert first.upstream_request["messages"] == second.upstream_request["messages"]
    assert first.prompt_token_ids == second.prompt_token_ids
    assert first.native_request["system"] != second.native_request["system"]


def test_pi_request_without_beta_streams(proxy, session):
    body = {
        "model": "m",
        "max_tokens": 16384,
        "system": "You are pi.",
        "stream": True,
        "tools": [BASH],
        "messages": [{"role": "user", "content": "hi"}],
    }
    with client(proxy, session).messages.stream(
        **{k: v for k, v in body.items() if k != "stream"},
        extra_headers={"anthropic-beta": "interleaved-thinking-2025-05-14"},
    ) as s:
        final = s.get_final_message()
    assert final.content[0].text.startswith("w0 w1")
    (rec,) = records(proxy, session["session_id"])
    assert rec.upstream_request["messages"][0] == {"role": "system", "content": "You are pi."}


def test_trailing_assistant_message_is_continued(proxy, session):
    client(proxy, session).messages.create(
        model="m",
        max_tokens=2,
        messages=[{"role": "user", "content": "count"}, {"role": "assistant", "content": "w0"}],
    )
    (rec,) = records(proxy, session["session_id"])
    up = rec.upstream_request
    assert up["continue_final_message"] is True and up["add_generation_prompt"] is False
    assert up["messages"][-1] == {"role": "assistant", "content": "w0"}


# --- errors -------------------------------------------------------------------------------------
def test_unknown_key_is_401_in_anthropic_shape_and_not_recorded(proxy, session):
    bad = anthropic.Anthropic(base_url=proxy.url, api_key="sk-polar-nope", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as exc:
        bad.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert exc.value.body["type"] == "error"
    assert exc.value.body["error"]["type"] == "authentication_error"
    assert "unknown or missing API key" in exc.value.body["error"]["message"]
    assert records(proxy, session["session_id"]) == []


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"model": "m", "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
        (
            {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "tool_use"}]}]},
            "tool_use",
        ),
        (
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": [{"type": "tool_use", "id": "a", "name": "b", "input": {}}]}],
            },
            "assistant",
        ),
        (
            {"model": "m", "max_tokens": 5, "tools": [{"name": "t"}], "messages": [{"role": "user", "content": "x"}]},
            "input_schema",
        ),
        (
            {
                "model": "m",
                "max_tokens": 5,
                "tool_choice": {"type": "tool"},
                "messages": [{"role": "user", "content": "x"}],
            },
            "tool_choice",
        ),
    ],
)
def test_malformed_request_is_400_invalid_request_error(proxy, session, body, needle):
    with pytest.raises(anthropic.BadRequestError) as exc:
        client(proxy, session).post("/v1/messages", body=body, cast_to=anthropic.types.Message)
    assert exc.value.body["error"]["type"] == "invalid_request_error"
    assert needle in exc.value.body["error"]["message"]
    assert records(proxy, session["session_id"]) == []


def test_unknown_messages_route_is_not_found_error(proxy, session):
    with pytest.raises(anthropic.NotFoundError) as exc:
        client(proxy, session).messages.count_tokens(model="m", messages=[{"role": "user", "content": "x"}])
    assert exc.value.body["error"]["type"] == "not_found_error"


def test_upstream_500_is_api_error_and_recorded(proxy, session):
    with pytest.raises(anthropic.InternalServerError) as exc:
        client(proxy, session).messages.create(
            model="m", max_tokens=5, messages=[{"role": "user", "content": "[fault:http500]"}]
        )
    assert exc.value.body["error"]["type"] == "api_error" and "engine crashed" in exc.value.body["error"]["message"]
    (rec,) = records(proxy, session["session_id"])
    assert rec.status == "upstream_error" and rec.completion_token_ids == []


def test_context_overflow_reads_as_prompt_too_long(proxy, session):
    with pytest.raises(anthropic.BadRequestError) as exc:
        client(proxy, session).messages.create(
            model="m", max_tokens=5, messages=[{"role": "user", "content": "[fault:http400_overflow]"}]
        )
    error = exc.value.body["error"]
    assert error["type"] == "invalid_request_error" and error["message"].startswith("prompt is too long")
    assert records(proxy, session["session_id"])[0].status == "context_overflow"


def test_stream_cut_midway_is_an_error_event_and_a_failed_record(proxy, session):
    texts = []
    c = client(proxy, session)
    with (
        pytest.raises(anthropic.APIStatusError) as exc,
        c.messages.stream(
            model="m",
            max_tokens=10,
            messages=[{"role": "user", "content": "[fault:cut]"}],
        ) as s,
    ):
        texts.extend(s.text_stream)
    assert texts  # the first tokens did arrive live, before the cut
    assert exc.value.body["type"] == "error" and exc.value.body["error"]["type"] == "api_error"
    (rec,) = records(proxy, session["session_id"])
    assert rec.status == "upstream_error" and rec.stream and rec.error


# --- the dialect on its own: fallbacks the fake engine never produces ---------------------------
def _events(chunks: list[bytes]) -> list[dict]:
    out = []
    for chunk in chunks:
        event, data = chunk.decode().strip().split("\n")
        out.append(orjson.loads(data.removeprefix("data: ")))
        assert event == "event: " + out[-1]["type"]
    return out


def _final(events: list[dict]):
    """The message the SDK's own accumulator builds from our events (it checks their order)."""
    from anthropic.lib.streaming._messages import accumulate_event

    snapshot, bufs = None, {}
    for e in events:
        snapshot = accumulate_event(event=e, current_snapshot=snapshot, json_bufs=bufs)
    return snapshot


def test_arguments_that_are_not_an_object_are_wrapped_and_restored():
    d = Anthropic()
    req = ChatRequest(model="m", messages=[])
    done = Completion(
        tool_calls=[ToolCall("c1", "bash", "ls -la"), ToolCall("c2", "bash", "")], finish_reason="tool_calls"
    )
    content = d.render_response(done, req)["content"]
    assert content[0]["input"] == {RAW_ARGUMENTS: "ls -la"} and content[1]["input"] == {}
    # streamed: held back, then sent whole and parseable
    r = d.stream_renderer(req)
    chunks = (
        r.delta(Delta(tool_call=ToolCallDelta(0, "c1", "bash", "ls")))
        + r.delta(Delta(tool_call=ToolCallDelta(0, None, None, " -la")))
        + r.finish(done)
    )
    final = _final(_events(chunks))
    assert final.content[0].input == {RAW_ARGUMENTS: "ls -la"} and final.stop_reason == "tool_use"
    back = d.parse_request(
        {
            "model": "m",
            "max_tokens": 5,
            "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": content}],
        },
        {},
        {},
    )
    assert [t.arguments for t in back.messages[1].tool_calls] == ["ls -la", "{}"]


def test_stream_blocks_open_and_close_in_order():
    r = Anthropic().stream_renderer(ChatRequest(model="m", messages=[]))
    chunks = r.delta(Delta(reasoning="hm")) + r.delta(Delta(text="a")) + r.delta(Delta(text="b"))
    chunks += r.delta(Delta(tool_call=ToolCallDelta(0, "c1", "bash", '{"command": ')))
    chunks += r.delta(Delta(tool_call=ToolCallDelta(0, None, None, '"ls"}')))
    chunks += r.delta(Delta(tool_call=ToolCallDelta(1, "c2", "bash", "{}")))
    chunks += r.finish(Completion(text="ab", reasoning="hm", finish_reason="tool_calls"))
    events = _events(chunks)
    starts = [e["index"] for e in events if e["type"] == "content_block_start"]
    stops = [e["index"] for e in events if e["type"] == "content_block_stop"]
    assert starts == stops == [0, 1, 2, 3]
    final = _final(events)
    assert [b.type for b in final.content] == ["thinking", "text", "tool_use", "tool_use"]
    assert final.content[0].signature == signature("hm") and final.content[1].text == "ab"
    assert final.content[2].input == {"command": "ls"} and final.content[3].input == {}
    assert final.stop_reason == "tool_use"


@pytest.mark.parametrize("stream", [False, True])
def test_empty_output_still_has_a_text_block(stream):
    d = Anthropic()
    req = ChatRequest(model="m", messages=[])
    empty = Completion(finish_reason="stop")
    if stream:
        r = d.stream_renderer(req)
        final = _final(_events(r.finish(empty)))
        content = [{"type": b.type, "text": b.text} for b in final.content]
    else:
        content = d.render_response(empty, req)["content"]
    assert content == [{"type": "text", "text": ""}]


@pytest.mark.parametrize(
    ("err", "status", "etype"),
    [
        (UpstreamTimeout("slow"), 504, "timeout_error"),
        (Paused("weights updating"), 503, "overloaded_error"),
        (BodyTooLarge("big"), 413, "request_too_large"),
        (UnknownRoute("nope"), 404, "not_found_error"),
        (UpstreamError("bad gateway"), 502, "api_error"),
        (UpstreamError("rejected", status_code=422), 422, "invalid_request_error"),
    ],
)
def test_error_types_follow_the_status(err, status, etype):
    assert err.status_code == status
    assert Anthropic().render_error(err) == {"type": "error", "error": {"type": etype, "message": err.message}}


_LIMIT = "This model's maximum context length is 32768 tokens. However, you requested "


@pytest.mark.parametrize(
    ("upstream", "expected"),
    [
        (
            _LIMIT
            + "100 output tokens and your prompt contains at least 40000 input tokens, for a total of at least 40100.",
            "prompt is too long: 40000 tokens > 32768 maximum",
        ),
        (
            _LIMIT
            + "32000 output tokens and your prompt contains at least 1000 input tokens, "
            + "for a total of at least 33000.",
            (
                "input length and `max_tokens` exceed context limit: 1000 + 32000 > 32768, "
                "decrease input length or `max_tokens` and try again"
            ),
        ),
        ("context too long", "prompt is too long: context too long"),
    ],
)
def test_context_overflow_messages_are_the_ones_claude_code_parses(upstream, expected):
    body = Anthropic().render_error(ContextOverflow(upstream))
    assert body == {"type": "error", "error": {"type": "invalid_request_error", "message": expected}}
