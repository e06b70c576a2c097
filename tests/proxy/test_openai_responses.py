"""OpenAI Responses through the proxy, checked with the official SDK (it parses our SSE) and with a
Codex-shaped body sent raw."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx2
import openai
import orjson
import pytest
from aiohttp import web

from nemo_polar.bench.fake_upstream import FakeUpstream, FakeUpstreamThread
from nemo_polar.errors import RequestInvalid
from nemo_polar.proxy.dialects.openai_responses import OpenAIResponses
from nemo_polar.proxy.dialects.openai_responses_output import encode_reasoning
from tests.conftest import make_proxy, records, squeezed

TOOLS = [
    {
        "type": "function",
        "name": "bash",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
    }
]


def client(proxy, session) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.url + "/v1", api_key=session["api_key"], max_retries=0)


def sse_events(text: str) -> list[tuple[str, dict]]:
    """(event line, data) for each SSE event in a raw body."""
    out = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        out.append((lines["event"], orjson.loads(lines["data"])))
    return out


def upstream_bodies(fake_upstream) -> list[dict]:
    return orjson.loads(httpx2.get(fake_upstream.url + "/_requests").content)


class ThinkingUpstream(FakeUpstream):
    """Answers every call with reasoning then text (vLLM's shape, token fields included)."""

    REASONING = ("Let me", " think.")
    TEXT = ("Hi", " there")

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        self.requests.append(body)
        pieces = [("reasoning_content", r) for r in self.REASONING] + [("content", t) for t in self.TEXT]
        ids = list(range(2000, 2000 + len(pieces)))
        base = {"id": "think-1", "created": int(time.time()), "model": body.get("model")}
        usage = {"prompt_tokens": 7, "completion_tokens": len(pieces)}
        if not body.get("stream"):
            message = {
                "role": "assistant",
                "content": "".join(self.TEXT),
                "reasoning_content": "".join(self.REASONING),
            }
            choice = {
                "index": 0,
                "message": message,
                "finish_reason": "stop",
                "token_ids": ids,
                "logprobs": {"content": [{"logprob": -0.5} for _ in ids]},
            }
            out = dict(base, object="chat.completion", choices=[choice], usage=usage, prompt_token_ids=list(range(7)))
            return web.Response(body=orjson.dumps(out), content_type="application/json")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        chunk = dict(base, object="chat.completion.chunk")
        frames = [dict(chunk, prompt_token_ids=list(range(7)), choices=[{"index": 0, "delta": {"role": "assistant"}}])]
        for (field, piece), tid in zip(pieces, ids, strict=False):
            frames.append(
                dict(
                    chunk,
                    choices=[
                        {
                            "index": 0,
                            "delta": {field: piece},
                            "token_ids": [tid],
                            "logprobs": {"content": [{"logprob": -0.5}]},
                        }
                    ],
                )
            )
        frames += [
            dict(chunk, choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}]),
            dict(chunk, choices=[], usage=usage),
        ]
        for f in frames:
            await resp.write(b"data: " + orjson.dumps(f) + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp


@pytest.fixture
def thinking(tmp_path) -> Iterator[tuple]:
    up = FakeUpstreamThread()
    up.fake = ThinkingUpstream()
    with up, make_proxy(up.url, tmp_path) as p:
        s = p.proxy.sessions.open()
        yield p, {"session_id": s.id, "api_key": s.api_key}, up


# --- text ----------------------------------------------------------------------------------------
def test_non_streaming_text_is_answered_and_recorded(proxy, session):
    out = client(proxy, session).responses.create(model="any-name", input="hello", max_output_tokens=5)
    assert out.id.startswith("resp_") and out.object == "response" and out.model == "any-name"
    assert out.output_text == "w0 w1 w2 w3 w4"
    # the fake upstream always stops on the token limit
    assert out.status == "incomplete" and out.incomplete_details.reason == "max_output_tokens"
    (msg,) = out.output
    assert msg.type == "message" and msg.role == "assistant" and msg.id.startswith("msg_")
    assert msg.content[0].type == "output_text" and msg.content[0].annotations == []
    assert out.usage.output_tokens == 5 and out.usage.input_tokens > 0
    assert out.usage.total_tokens == out.usage.input_tokens + 5 and out.usage.input_tokens_details.cached_tokens == 0
    (rec,) = records(proxy, session["session_id"])
    assert rec.status == "ok" and rec.dialect == "openai_responses" and not rec.stream
    assert rec.completion_token_ids == [1000, 1001, 1002, 1003, 1004] and len(rec.completion_logprobs) == 5
    assert rec.prompt_token_ids
    assert rec.upstream_request["messages"] == [{"role": "user", "content": "hello"}]
    assert rec.upstream_request["max_tokens"] == 5


def test_streaming_text_emits_the_exact_event_sequence(proxy, session):
    events = list(client(proxy, session).responses.create(model="m", input="hi", max_output_tokens=4, stream=True))
    types = [e.type for e in events]
    assert squeezed(types) == [  # the tokens one read of the upstream brought are one delta: one or more
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.incomplete",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert "".join(d.delta for d in deltas) == "w0 w1 w2 w3"
    item_id = events[2].item.id
    assert all(d.item_id == item_id and d.output_index == 0 and d.content_index == 0 for d in deltas)
    assert events[-2].item.content[0].text == "w0 w1 w2 w3" and events[-2].item.status == "incomplete"
    final = events[-1].response
    assert final.id == events[0].response.id and final.status == "incomplete"
    assert final.output[0].id == item_id and final.usage.output_tokens == 4
    (rec,) = records(proxy, session["session_id"])
    assert rec.stream and rec.status == "ok" and rec.completion_token_ids == [1000, 1001, 1002, 1003]
    assert rec.first_token_at is not None and rec.first_token_at <= rec.finished_at


# --- tools ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("stream", [False, True])
def test_tool_calls_round_trip(proxy, session, fake_upstream, stream):
    c = client(proxy, session)
    prompt = [{"role": "user", "content": "[fault:tool_call] list files"}]
    if stream:  # the SDK's stream helper: it checks item identities and needs response.completed
        with c.responses.stream(model="m", input=prompt, tools=TOOLS) as s:
            events = list(s)
            out = s.get_final_response()
        args = [e for e in events if e.type == "response.function_call_arguments.delta"]
        assert "".join(a.delta for a in args) == '{"command": "ls"}'
        done = next(e for e in events if e.type == "response.function_call_arguments.done")
        assert done.arguments == '{"command": "ls"}' and done.item_id == args[0].item_id
    else:
        out = c.responses.create(model="m", input=prompt, tools=TOOLS)
    assert out.status == "completed"
    (call,) = out.output
    assert call.type == "function_call" and call.id.startswith("fc_") and call.status == "completed"
    assert (call.name, call.call_id, call.arguments) == ("bash", "call_fake", '{"command": "ls"}')
    assert records(proxy, session["session_id"])[0].message["tool_calls"][0]["name"] == "bash"
    # the follow-up carries the call back (as the SDK returned it) and its output
    follow = prompt + [
        call.model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": "call_fake", "output": "a.py"},
    ]
    again = c.responses.create(model="m", input=follow, tools=TOOLS)
    assert again.status == "completed"  # the fault marker is still in the history: another call
    sent = upstream_bodies(fake_upstream)[-1]["messages"]
    assert sent[1] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "call_fake", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
        ],
    }
    assert sent[2] == {"role": "tool", "content": "a.py", "tool_call_id": "call_fake"}
    assert [r.seq for r in records(proxy, session["session_id"])] == [0, 1]


def test_namespaced_tool_call_is_reported_with_its_namespace(proxy, session, fake_upstream):
    ns = {
        "type": "namespace",
        "name": "multi_agent_v1",
        "description": "sub-agents",
        "tools": [{"type": "function", "name": "spawn_agent", "parameters": {"type": "object"}}],
    }
    events = list(
        client(proxy, session).responses.create(
            model="m", input="[fault:tool_call] spawn", tools=[ns, *TOOLS], stream=True
        )
    )
    assert [t["function"]["name"] for t in upstream_bodies(fake_upstream)[-1]["tools"]] == [
        "multi_agent_v1__spawn_agent",
        "bash",
    ]
    added = next(e for e in events if e.type == "response.output_item.added")
    done = next(e for e in events if e.type == "response.output_item.done")
    for item in (added.item, done.item, events[-1].response.output[0]):
        assert (item.type, item.name, item.namespace) == ("function_call", "spawn_agent", "multi_agent_v1")
    assert events[-1].type == "response.completed"


# --- reasoning -----------------------------------------------------------------------------------
def test_reasoning_streams_as_a_summary_and_replays_exactly(thinking):
    proxy, session, up = thinking
    c = client(proxy, session)
    with c.responses.stream(model="m", input="hi", reasoning={"effort": "high", "summary": "auto"}) as s:
        events = list(s)
        out = s.get_final_response()
    types = squeezed([e.type for e in events])
    assert types[:8] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        "response.output_item.done",
    ]
    assert types[8:11] == ["response.output_item.added", "response.content_part.added", "response.output_text.delta"]
    assert types[-1] == "response.completed"
    reasoning, message = out.output
    assert [e.output_index for e in events if e.type == "response.output_item.added"] == [0, 1]
    assert reasoning.type == "reasoning" and reasoning.summary[0].text == "Let me think."
    assert reasoning.encrypted_content == encode_reasoning("Let me think.")
    assert message.content[0].text == "Hi there" and out.status == "completed"
    assert up.fake.requests[-1]["chat_template_kwargs"] == {"enable_thinking": True}
    (rec,) = records(proxy, session["session_id"])
    assert rec.message["reasoning"] == "Let me think." and rec.completion_token_ids == [2000, 2001, 2002, 2003]

    # Codex replays the reasoning item without its id; the exact text goes back to the model
    replay = [
        {
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": "(edited)"}],
            "encrypted_content": reasoning.encrypted_content,
        },
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hi there"}]},
        {"type": "message", "role": "user", "content": "and now?"},
    ]
    c.responses.create(model="m", input=[{"role": "user", "content": "hi"}, *replay])
    assistant = up.fake.requests[-1]["messages"][1]
    assert assistant == {"role": "assistant", "content": "Hi there", "reasoning": "Let me think."}


def test_non_streaming_reasoning_item(thinking):
    proxy, session, _ = thinking
    out = client(proxy, session).responses.create(model="m", input="hi")
    assert [i.type for i in out.output] == ["reasoning", "message"]
    assert out.output[0].summary[0].text == "Let me think." and out.output[0].id.startswith("rs_")
    assert out.output_text == "Hi there"


def test_foreign_encrypted_reasoning_is_kept_opaque(proxy, session, fake_upstream):
    blob = "gAAAAABo-opaque-openai-blob=="
    items = [
        {"role": "user", "content": "q"},
        {
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": "visible summary"}],
            "encrypted_content": blob,
        },
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "a"}]},
        {"role": "user", "content": "next"},
    ]
    client(proxy, session).responses.create(model="m", input=items, max_output_tokens=1)
    body = upstream_bodies(fake_upstream)[-1]
    assert body["messages"][1] == {"role": "assistant", "content": "a", "reasoning": "visible summary"}
    assert blob not in orjson.dumps(body).decode()


# --- a Codex CLI 0.169 body, sent raw -------------------------------------------------------------
def codex_body() -> dict:
    def text(t: str) -> list[dict]:
        return [{"type": "input_text", "text": t}]

    return {
        "model": "gpt-5-codex",
        "input": [
            {"type": "message", "role": "developer", "content": text("<permissions instructions>sandboxed")},
            {"type": "message", "role": "developer", "content": text("You are Codex.")},
            {
                "type": "message",
                "role": "user",
                "content": text("<environment_context><cwd>/w</cwd></environment_context>"),
            },
            {"type": "message", "role": "user", "content": text("list the files")},
            {
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": "I should run ls."}],
                "content": None,
                "encrypted_content": encode_reasoning("I should run ls, then spawn."),
            },
            {"type": "function_call", "name": "exec_command", "arguments": '{"cmd":"ls"}', "call_id": "call_1"},
            {
                "type": "function_call",
                "name": "spawn_agent",
                "namespace": "multi_agent_v1",
                "arguments": "{}",
                "call_id": "call_2",
            },
            {
                "type": "function_call_output",
                "call_id": "call_1",
                "output": "Chunk ID: 1\nWall time: 0.01 seconds\nProcess exited with code 0\nOutput:\na.py\n",
            },
            {"type": "function_call_output", "call_id": "call_2", "output": text("agent started")},
            {"type": "message", "role": "user", "content": text("[fault:tool_call] again")},
        ],
        "tools": [
            {
                "type": "function",
                "name": "exec_command",
                "description": "Runs a command.",
                "strict": False,
                "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
            },
            {
                "type": "function",
                "name": "write_stdin",
                "description": "Writes to a session.",
                "strict": False,
                "parameters": {"type": "object", "properties": {}},
            },
            {
                "type": "namespace",
                "name": "multi_agent_v1",
                "description": "Sub-agents.",
                "tools": [
                    {
                        "type": "function",
                        "name": "spawn_agent",
                        "description": "Starts an agent.",
                        "strict": False,
                        "parameters": {"type": "object", "properties": {}},
                    }
                ],
            },
            {"type": "web_search", "external_web_access": False},
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "reasoning": {"summary": "auto"},
        "store": False,
        "stream": True,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "019a-session",
        "client_metadata": {"x-codex-turn-metadata": "{}"},
    }


def test_codex_shaped_request_is_translated_and_streamed(proxy, session):
    r = httpx2.post(
        proxy.url + "/v1/responses",
        json=codex_body(),
        timeout=10,
        headers={"authorization": "Bearer " + session["api_key"], "originator": "codex_exec"},
    )
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    assert all(name == data["type"] for name, data in events)  # the `event:` line names each event
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    assert [n for n, _ in events][:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    final = events[-1][1]["response"]
    assert events[-1][0] == "response.completed" and final["model"] == "gpt-5-codex"
    (call,) = final["output"]
    assert (call["name"], call["call_id"], call["arguments"]) == ("exec_command", "call_fake", '{"command": "ls"}')
    assert "namespace" not in call
    assert set(final["usage"]) == {
        "input_tokens",
        "input_tokens_details",
        "output_tokens",
        "output_tokens_details",
        "total_tokens",
    }

    (rec,) = records(proxy, session["session_id"])
    up = rec.upstream_request
    assert [m["role"] for m in up["messages"]] == [
        "system",
        "system",
        "user",
        "user",
        "assistant",
        "tool",
        "tool",
        "user",
    ]
    assert up["messages"][0]["content"] == "<permissions instructions>sandboxed"
    assistant = up["messages"][4]
    assert assistant["reasoning"] == "I should run ls, then spawn."  # ours: decoded, not the summary
    assert [(t["id"], t["function"]["name"]) for t in assistant["tool_calls"]] == [
        ("call_1", "exec_command"),
        ("call_2", "multi_agent_v1__spawn_agent"),
    ]
    assert up["messages"][5] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "Chunk ID: 1\nWall time: 0.01 seconds\nProcess exited with code 0\nOutput:\na.py\n",
    }
    assert up["messages"][6] == {"role": "tool", "tool_call_id": "call_2", "content": "agent started"}
    assert [t["function"]["name"] for t in up["tools"]] == [
        "exec_command",
        "write_stdin",
        "multi_agent_v1__spawn_agent",
    ]
    assert up["tool_choice"] == "auto" and up["stream"] is True
    assert up["chat_template_kwargs"] == {"enable_thinking": True}
    assert rec.native_request["store"] is False and rec.status == "ok"


# --- translation details --------------------------------------------------------------------------
def parse(body: dict):
    return OpenAIResponses().parse_request(body, {"path": "/v1/responses"}, {})


def test_request_options_map_to_the_canonical_form():
    req = parse(
        {
            "model": "m",
            "instructions": "be brief",
            "input": "q",
            "temperature": 0.5,
            "top_p": 0.9,
            "max_output_tokens": 64,
            "reasoning": {"effort": "none"},
            "tools": TOOLS,
            "tool_choice": {"type": "function", "name": "bash"},
            "text": {"format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}, "strict": True}},
        }
    )
    assert [(m.role, m.content) for m in req.messages] == [("system", "be brief"), ("user", "q")]
    assert (req.temperature, req.top_p, req.max_tokens, req.thinking) == (0.5, 0.9, 64, False)
    assert req.tool_choice == {"name": "bash"}
    assert req.response_format == {
        "type": "json_schema",
        "json_schema": {"name": "out", "schema": {"type": "object"}, "strict": True},
    }
    assert parse({"model": "m", "input": "q"}).thinking is None


def test_assistant_items_fold_into_turns():
    req = parse(
        {
            "model": "m",
            "input": [
                {"role": "user", "content": "q"},
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "r1"}]},
                {"type": "function_call", "name": "a", "arguments": "{}", "call_id": "c1"},
                {"type": "function_call_output", "call_id": "c1", "output": "o1"},
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "r2"}]},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]},
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "r3"}]},
                {"type": "message", "role": "assistant", "content": "more"},
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "look"},
                        {"type": "input_image", "image_url": "data:image/png;base64,AAAA"},
                    ],
                },
            ],
        }
    )
    shape = [(m.role, m.reasoning, m.content, [t.id for t in m.tool_calls]) for m in req.messages]
    assert shape == [
        ("user", None, "q", []),
        ("assistant", "r1", "", ["c1"]),
        ("tool", None, "o1", []),
        ("assistant", "r2", "done", []),
        ("assistant", "r3", "more", []),
        (
            "user",
            None,
            [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            ],
            [],
        ),
    ]


@pytest.mark.parametrize(
    "body, words",
    [
        ({"model": "m", "input": [{"type": "function_call", "name": "x", "arguments": "{}"}]}, "call_id"),
        ({"model": "m", "input": [{"role": "robot", "content": "x"}]}, "role"),
        ({"input": "x"}, "model"),
        ({"model": "m", "input": 5}, "input"),
        ({"model": "m", "input": "x", "previous_response_id": "resp_1"}, "never stores"),
        ({"model": "m", "input": [{"type": "item_reference", "id": "msg_1"}]}, "item_reference"),
        ({"model": "m", "input": [{"type": "reasoning", "summary": [], "encrypted_content": "polar:%%%"}]}, "corrupt"),
        ({"model": "m", "input": "x", "tool_choice": {"type": "web_search"}}, "tool_choice"),
        ({"model": "m", "input": []}, "no messages"),
    ],
)
def test_malformed_requests_are_refused_with_a_reason(body, words):
    with pytest.raises(RequestInvalid) as exc:
        parse(body)
    assert words in exc.value.message


# --- errors --------------------------------------------------------------------------------------
def test_unknown_key_is_401_in_openai_shape_and_not_recorded(proxy, session):
    bad = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-polar-nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as exc:
        bad.responses.create(model="m", input="x")
    assert "unknown or missing API key" in exc.value.body["message"]
    assert exc.value.body["type"] == "authentication_error"
    assert records(proxy, session["session_id"]) == []


def test_malformed_input_is_400_in_openai_shape(proxy, session):
    with pytest.raises(openai.BadRequestError) as exc:
        client(proxy, session).responses.create(model="m", input=[{"type": "function_call", "name": "x"}])
    assert exc.value.body["type"] == "invalid_request_error" and "call_id" in exc.value.body["message"]
    # the route without /v1 answers too
    r = httpx2.post(
        proxy.url + "/responses",
        json={"model": "m", "input": 5},
        headers={"authorization": "Bearer " + session["api_key"]},
    )
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    assert records(proxy, session["session_id"]) == []


def test_upstream_500_is_an_openai_error_and_recorded(proxy, session):
    with pytest.raises(openai.APIStatusError) as exc:
        client(proxy, session).responses.create(model="m", input="[fault:http500]")
    assert exc.value.status_code >= 500 and exc.value.body["type"] == "upstream_error"
    (rec,) = records(proxy, session["session_id"])
    assert rec.status == "upstream_error" and rec.completion_token_ids == []


def test_stream_cut_midway_ends_in_response_failed(proxy, session):
    c = client(proxy, session)
    events = list(c.responses.create(model="m", input="[fault:cut]", stream=True))
    assert events[-1].type == "response.failed" and "response.completed" not in [e.type for e in events]
    failed = events[-1].response
    assert failed.status == "failed" and failed.error.code == "server_error" and failed.error.message
    assert failed.id == events[0].response.id and failed.output[0].status == "incomplete"
    # the SDK's helper refuses to hand out a final response
    with (
        pytest.raises(RuntimeError, match="response.completed"),
        c.responses.stream(model="m", input="[fault:cut]") as s,
    ):
        s.get_final_response()
    recs = records(proxy, session["session_id"])
    assert len(recs) == 2 and all(r.status not in ("ok", "client_disconnected") for r in recs)
