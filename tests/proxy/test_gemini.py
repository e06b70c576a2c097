"""Gemini generateContent through the proxy, checked with the google-genai SDK (it parses our SSE).

The SDK's default API version is v1 (`/v1/models/M:generateContent`); Gemini CLI and Pi use v1beta
(`/v1beta/models/M:streamGenerateContent?alt=sse`). Both are served and both are exercised here.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from google import genai
from google.genai import errors, types

from nemo_polar.chat import Completion, Delta, ToolCall, Usage
from nemo_polar.errors import BodyTooLarge, Paused, Unauthorized, UpstreamError, UpstreamTimeout
from nemo_polar.proxy.dialects.gemini import Gemini
from tests.conftest import records

BASH = types.Tool(
    function_declarations=[
        types.FunctionDeclaration(
            name="bash",
            description="run a command",
            parameters=types.Schema(
                type=types.Type.OBJECT, properties={"command": types.Schema(type=types.Type.STRING)}
            ),
        )
    ]
)


def client(proxy, session, api_version: str | None = None) -> genai.Client:
    return genai.Client(
        api_key=session["api_key"], http_options=types.HttpOptions(base_url=proxy.url, api_version=api_version)
    )


def http(method: str, url: str, body: dict | None = None, **headers: str) -> tuple[int, dict, str]:
    """A raw call (stdlib only): status, headers, body text."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"} | headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


def sse_chunks(text: str) -> list[dict]:
    return [json.loads(line[6:]) for line in text.split("\n") if line.startswith("data: ")]


def test_non_streaming_call_is_answered_and_recorded(proxy, session):
    c = client(proxy, session)  # held: a Client closes its connection pool when collected
    out = c.models.generate_content(
        model="gemini-2.5-pro",
        contents="hello",
        config=types.GenerateContentConfig(max_output_tokens=5, system_instruction="be brief", temperature=0.5),
    )
    assert out.text == "w0 w1 w2 w3 w4"
    assert out.candidates[0].finish_reason == types.FinishReason.MAX_TOKENS
    assert out.model_version == "gemini-2.5-pro"
    assert out.usage_metadata.candidates_token_count == 5
    assert out.usage_metadata.total_token_count == out.usage_metadata.prompt_token_count + 5
    (rec,) = records(proxy, session["session_id"])
    assert rec.status == "ok" and rec.dialect == "gemini" and not rec.stream
    assert rec.completion_token_ids == [1000, 1001, 1002, 1003, 1004] and rec.prompt_token_ids
    assert len(rec.completion_logprobs) == 5
    up = rec.upstream_request
    assert up["messages"] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]
    assert up["max_tokens"] == 5 and up["temperature"] == 0.5 and up["stream"] is False


@pytest.mark.parametrize("api_version", [None, "v1beta"])
def test_streaming_relays_every_token_then_finish_and_usage(proxy, session, api_version):
    c = client(proxy, session, api_version)
    chunks = list(
        c.models.generate_content_stream(
            model="m",
            contents="hi",
            config=types.GenerateContentConfig(max_output_tokens=4),
        )
    )
    assert "".join(c.text or "" for c in chunks) == "w0 w1 w2 w3"
    assert 2 <= len(chunks) <= 5  # the tokens of each read of the upstream as one chunk, then the closing one
    assert all(c.candidates[0].finish_reason is None for c in chunks[:-1])
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.MAX_TOKENS
    assert chunks[-1].usage_metadata.candidates_token_count == 4
    assert len({c.response_id for c in chunks}) == 1
    (rec,) = records(proxy, session["session_id"])
    assert rec.stream and rec.status == "ok" and rec.completion_token_ids == [1000, 1001, 1002, 1003]
    assert rec.first_token_at is not None and rec.first_token_at <= rec.finished_at


@pytest.mark.parametrize("stream", [False, True])
def test_tool_calls_round_trip(proxy, session, stream):
    c = client(proxy, session, "v1beta")
    config = types.GenerateContentConfig(tools=[BASH])
    prompt = types.Content(role="user", parts=[types.Part(text="[fault:tool_call] list files")])
    if stream:
        chunks = list(c.models.generate_content_stream(model="m", contents=[prompt], config=config))
        calls = [fc for ch in chunks for fc in ch.function_calls or []]
        assert chunks[-1].function_calls and chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP
        model_turn = types.Content(role="model", parts=[types.Part(function_call=fc) for fc in calls])
    else:
        out = c.models.generate_content(model="m", contents=[prompt], config=config)
        calls = out.function_calls
        assert out.candidates[0].finish_reason == types.FinishReason.STOP
        model_turn = out.candidates[0].content
    assert len(calls) == 1
    assert (calls[0].id, calls[0].name, calls[0].args) == ("call_fake", "bash", {"command": "ls"})
    (rec,) = records(proxy, session["session_id"])
    assert rec.message["tool_calls"][0]["name"] == "bash"
    assert rec.upstream_request["tools"][0]["function"]["parameters"]["properties"]["command"]["type"] == "string"
    # the follow-up carrying the tool result, as the SDK builds it from the answer
    result = types.Content(
        role="user",
        parts=[
            types.Part(
                function_response=types.FunctionResponse(
                    id=calls[0].id, name="bash", response={"output": "a.py\nb.py"}
                )
            )
        ],
    )
    again = c.models.generate_content(model="m", contents=[prompt, model_turn, result], config=config)
    assert again.candidates[0].content.parts  # accepted and answered
    first, follow = records(proxy, session["session_id"])
    assert (first.seq, follow.seq) == (0, 1)
    assistant, tool = follow.upstream_request["messages"][1:]
    assert assistant["tool_calls"] == [
        {"id": "call_fake", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    ]
    assert tool == {"role": "tool", "content": "a.py\nb.py", "tool_call_id": "call_fake"}


def gemini_cli_body() -> dict:
    """What Gemini CLI sends after one tool call: shapes from feasibility.md section 4."""
    decl = {
        "name": "run_shell_command",
        "description": "Runs a shell command",
        "parameters": {
            "type": "OBJECT",
            "required": ["command"],
            "properties": {
                "command": {"type": "STRING", "description": "the command"},
                "description": {"type": "STRING"},
                "env": {"type": "ARRAY", "items": {"type": "OBJECT", "properties": {"type": {"type": "STRING"}}}},
            },
        },
    }
    read = {
        "name": "read_file",
        "description": "Reads a file",
        "parametersJsonSchema": {"type": "object", "properties": {"absolute_path": {"type": "string"}}},
    }
    return {
        "contents": [
            {
                "role": "user",
                "parts": [{"text": "<session_context>cwd: /w</session_context>"}, {"text": "list files"}],
            },
            {
                "role": "model",
                "parts": [
                    {
                        "functionCall": {"name": "run_shell_command", "args": {"command": "ls"}},
                        "thoughtSignature": "skip_thought_signature_validator",
                    }
                ],
            },
            {
                "role": "user",
                "parts": [
                    {
                        "functionResponse": {
                            "id": "run_shell_command-1712-abc",
                            "name": "run_shell_command",
                            "response": {"output": "<untrusted_context>a.py"},
                        }
                    }
                ],
            },
        ],
        "systemInstruction": {"role": "user", "parts": [{"text": "You are an interactive CLI agent."}]},
        "tools": [{"functionDeclarations": [decl, read]}, {"googleSearch": {}}],
        "generationConfig": {
            "temperature": 1,
            "topP": 0.95,
            "topK": 64,
            "maxOutputTokens": 6,
            "thinkingConfig": {"includeThoughts": True},
        },
    }


def test_gemini_cli_request_is_translated(proxy, session, fake_upstream):
    status, headers, text = http(
        "POST",
        f"{proxy.url}/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
        gemini_cli_body(),
        **{"x-goog-api-key": session["api_key"]},
    )
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    assert "[DONE]" not in text
    chunks = sse_chunks(text)
    assert "".join(p["text"] for ch in chunks for p in ch["candidates"][0]["content"]["parts"]) == "w0 w1 w2 w3 w4 w5"
    assert chunks[-1]["candidates"][0]["finishReason"] == "MAX_TOKENS" and "usageMetadata" in chunks[-1]
    (up,) = json.loads(http("GET", f"{fake_upstream.url}/_requests")[2])
    assert (up["temperature"], up["top_p"], up["top_k"], up["max_tokens"]) == (1, 0.95, 64, 6)
    assert up["chat_template_kwargs"] == {"enable_thinking": True}
    system, user, assistant, tool = up["messages"]
    assert system == {"role": "system", "content": "You are an interactive CLI agent."}
    assert user["content"] == [
        {"type": "text", "text": "<session_context>cwd: /w</session_context>"},
        {"type": "text", "text": "list files"},
    ]
    # the call had no id: one is minted from its place, and the response (with the CLI's own id) takes it
    assert assistant["tool_calls"] == [
        {
            "id": "call_1_0",
            "type": "function",
            "function": {"name": "run_shell_command", "arguments": '{"command": "ls"}'},
        }
    ]
    assert tool == {"role": "tool", "content": "<untrusted_context>a.py", "tool_call_id": "call_1_0"}
    shell, read = up["tools"]  # googleSearch is dropped
    props = shell["function"]["parameters"]["properties"]
    assert shell["function"]["parameters"]["type"] == "object" and props["command"]["type"] == "string"
    assert props["env"]["type"] == "array" and props["env"]["items"]["properties"]["type"] == {"type": "string"}
    assert read["function"]["parameters"]["properties"]["absolute_path"] == {"type": "string"}
    (rec,) = records(proxy, session["session_id"])
    assert rec.upstream_request == up and rec.stream and rec.completion_token_ids


def test_same_history_gives_the_same_canonical_request():
    g, body = Gemini(), gemini_cli_body()
    body["contents"][1]["parts"].append({"functionCall": {"name": "run_shell_command", "args": {"command": "pwd"}}})
    body["contents"][2]["parts"] = [
        {"functionResponse": {"name": "run_shell_command", "response": {"output": "a.py"}}},
        {
            "functionResponse": {
                "name": "run_shell_command",
                "response": {"error": "denied"},
                "parts": [{"inlineData": {"mimeType": "image/png", "data": "iVBO"}}],
            }
        },
        {"text": "and then?"},
    ]
    params = {"model": "g", "path": "/v1beta/models/g:generateContent"}
    first, second = g.parse_request(body, params, {}), g.parse_request(json.loads(json.dumps(body)), params, {})
    assert first == second and not first.stream
    assistant, out1, out2, extra = first.messages[2:]
    assert [t.id for t in assistant.tool_calls] == ["call_1_0", "call_1_1"]
    assert (out1.tool_call_id, out1.content) == ("call_1_0", "a.py")
    assert (out2.tool_call_id, out2.content) == ("call_1_1", '{"error": "denied"}')
    # the turn's other parts (an image a tool returned, text) follow the results, never come between
    assert extra.role == "user" and extra.content == [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
        {"type": "text", "text": "and then?"},
    ]


def test_thinking_round_trip():
    g = Gemini()
    body = {
        "contents": [
            {"role": "user", "parts": [{"text": "q"}]},
            {"role": "model", "parts": [{"text": "let me see", "thought": True}, {"text": "4"}]},
            {"role": "user", "parts": [{"text": "sure?"}]},
        ],
        "generationConfig": {"thinkingConfig": {"includeThoughts": True}},
    }
    req = g.parse_request(body, {"model": "g", "path": "/v1beta/models/g:generateContent"}, {})
    assert req.thinking is True
    assert (req.messages[1].reasoning, req.messages[1].content) == ("let me see", "4")
    done = Completion(text="yes", reasoning="check: 2+2", finish_reason="stop", usage=Usage(7, 3), id="r1")
    out = types.GenerateContentResponse.model_validate(g.render_response(done, req))
    thought, answer = out.candidates[0].content.parts
    assert (thought.thought, thought.text, answer.text) == (True, "check: 2+2", "yes")
    stream = g.stream_renderer(req)
    events = stream.delta(Delta(reasoning="check")) + stream.delta(Delta(text="yes")) + stream.finish(done)
    parts = [p for e in events for p in json.loads(e[6:])["candidates"][0]["content"]["parts"]]
    assert parts == [{"text": "check", "thought": True}, {"text": "yes"}]
    # without includeThoughts Gemini returns no thoughts; a zero budget turns thinking off
    quiet = g.parse_request(
        body | {"generationConfig": {"thinkingConfig": {"thinkingBudget": 0}}},
        {"model": "g", "path": "/v1beta/models/g:generateContent"},
        {},
    )
    assert quiet.thinking is False
    assert [p["text"] for p in g.render_response(done, quiet)["candidates"][0]["content"]["parts"]] == ["yes"]


def test_arguments_that_are_not_an_object_round_trip_verbatim():
    g = Gemini()
    req = g.parse_request({"contents": [{"parts": [{"text": "x"}]}]}, {"model": "g", "path": "/v1beta/x"}, {})
    bad = Completion(tool_calls=[ToolCall("c1", "bash", '{"command": "ls"')], finish_reason="tool_calls")
    (part,) = g.render_response(bad, req)["candidates"][0]["content"]["parts"]
    assert part["functionCall"]["args"] == {"_raw_arguments": '{"command": "ls"'}
    back = g.parse_request(
        {"contents": [{"parts": [{"text": "x"}]}, {"role": "model", "parts": [part]}]},
        {"model": "g", "path": "/v1beta/x"},
        {},
    )
    assert back.messages[1].tool_calls[0].arguments == '{"command": "ls"'


def test_unknown_key_is_401_in_google_shape_and_not_recorded(proxy, session):
    bad = genai.Client(api_key="sk-polar-nope", http_options=types.HttpOptions(base_url=proxy.url))
    with pytest.raises(errors.ClientError) as exc:
        bad.models.generate_content(model="m", contents="x")
    assert (exc.value.code, exc.value.status) == (401, "UNAUTHENTICATED")
    assert "unknown or missing API key" in exc.value.message
    assert records(proxy, session["session_id"]) == []


@pytest.mark.parametrize(
    "path,body,needle",
    [
        ("/v1beta/models/m:generateContent", {"contents": []}, "contents"),
        ("/v1beta/models/m:generateContent", {"contents": [{"role": "system", "parts": [{"text": "x"}]}]}, "role"),
        (
            "/v1beta/models/m:generateContent",
            {"contents": [{"parts": [{"text": "x"}]}], "generationConfig": {"candidateCount": 2}},
            "candidateCount",
        ),
        ("/v1beta/models/m:streamGenerateContent", {"contents": [{"parts": [{"text": "x"}]}]}, "alt=sse"),
        (
            "/v1beta/models/m:generateContent",
            {"contents": [{"parts": [{"inlineData": {"mimeType": "application/pdf", "data": "JVBE"}}]}]},
            "only images",
        ),
        (
            "/v1beta/models/m:generateContent",
            {"contents": [{"parts": [{"text": "x"}]}], "toolConfig": {"functionCallingConfig": {"mode": "SOMETIMES"}}},
            "mode",
        ),
    ],
)
def test_malformed_input_is_400_invalid_argument(proxy, session, path, body, needle):
    status, _, text = http("POST", f"{proxy.url}{path}?key={session['api_key']}", body)  # a key in the query works too
    assert status == 400
    err = json.loads(text)["error"]
    assert err["code"] == 400 and err["status"] == "INVALID_ARGUMENT" and needle in err["message"]
    assert records(proxy, session["session_id"]) == []


def test_upstream_500_is_a_server_error(proxy, session):
    c = client(proxy, session)
    with pytest.raises(errors.ServerError) as exc:
        c.models.generate_content(model="m", contents="[fault:http500] x")
    assert exc.value.status == "INTERNAL" and "engine crashed" in exc.value.message
    (rec,) = records(proxy, session["session_id"])
    assert rec.status == "upstream_error"


def test_stream_cut_midway_raises_in_the_sdk_and_is_recorded_as_failed(proxy, session):
    c, seen = client(proxy, session, "v1beta"), []
    with pytest.raises(errors.APIError) as exc:
        for chunk in c.models.generate_content_stream(model="m", contents="[fault:cut] x"):
            seen.append(chunk.text)
    assert seen and exc.value.code >= 500 and exc.value.status == "INTERNAL"
    (rec,) = records(proxy, session["session_id"])
    assert rec.status != "ok" and rec.error


def test_error_statuses_use_google_names():
    g = Gemini()
    assert g.render_error(Unauthorized("no"))["error"]["status"] == "UNAUTHENTICATED"
    assert g.render_error(BodyTooLarge("big")) == {
        "error": {"code": 413, "message": "big", "status": "INVALID_ARGUMENT"}
    }
    assert g.render_error(UpstreamTimeout("slow"))["error"]["status"] == "DEADLINE_EXCEEDED"
    assert g.render_error(Paused("paused"))["error"]["status"] == "UNAVAILABLE"
    assert g.render_error(UpstreamError("rate", status_code=429))["error"]["status"] == "RESOURCE_EXHAUSTED"
    assert g.render_error(UpstreamError("bad gateway"))["error"] == {
        "code": 502,
        "message": "bad gateway",
        "status": "INTERNAL",
    }


def test_generation_and_tool_config_map_to_the_canonical_request():
    decls = [{"name": n, "parameters": {"type": "OBJECT"}} for n in ("a", "b", "c")]
    body = {
        "contents": [{"parts": [{"text": "x"}]}],
        "tools": [{"functionDeclarations": decls}, {"codeExecution": {}}],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["a", "c"]}},
        "generation_config": {  # snake_case, as Google's own curl examples write it
            "stop_sequences": ["END"],
            "seed": 7,
            "presencePenalty": 0.5,
            "frequencyPenalty": 0.25,
            "responseMimeType": "application/json",
            "responseSchema": {"type": "OBJECT", "properties": {"n": {"type": "INTEGER"}}},
        },
    }
    params = {"model": "g", "path": "/v1beta/models/g:generateContent"}
    req = Gemini().parse_request(body, params, {})
    assert [t.name for t in req.tools] == ["a", "c"] and req.tool_choice == "required"
    assert req.tools[0].parameters == {"type": "object"}
    assert (req.stop, req.seed, req.presence_penalty, req.frequency_penalty) == (["END"], 7, 0.5, 0.25)
    assert req.response_format == {
        "type": "json_schema",
        "json_schema": {"name": "response", "schema": {"type": "object", "properties": {"n": {"type": "integer"}}}},
    }
    one = body | {"toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["b"]}}}
    assert Gemini().parse_request(one, params, {}).tool_choice == {"name": "b"}
    off = body | {"toolConfig": {"functionCallingConfig": {"mode": "NONE"}}}
    assert Gemini().parse_request(off, params, {}).tool_choice == "none"


def test_the_model_in_the_path_is_each_calls_own_and_remembered_paths_are_bounded(proxy, session, monkeypatch):
    """Routes with the model in the path are matched once per path and remembered, up to a bound: a caller
    choosing a new model name every call neither grows the proxy's memory nor gets another path's model."""
    from nemo_polar.proxy import app

    monkeypatch.setattr(app, "_MATCHED_PATHS", 2)
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    key = {"x-goog-api-key": session["api_key"]}
    for name in ("m-1", "m-2", "m-3", "m-1", "m-3"):
        status, _, text = http("POST", f"{proxy.url}/v1beta/models/{name}:generateContent", body, **key)
        assert status == 200, text
        assert json.loads(text)["modelVersion"] == name  # this call's own model, never a remembered one's
    assert sorted(proxy.proxy._matched) == ["/v1beta/models/m-1:generateContent", "/v1beta/models/m-2:generateContent"]
