"""OpenAI Chat Completions: `POST /v1/chat/completions` (Qwen Code, mini-swe-agent, OpenHands, Pi)."""

from __future__ import annotations

import time
from typing import Any

from ...chat import ChatRequest, Completion, Delta, Message, Tool, ToolCall
from ...errors import ContextOverflow, PolarError, RequestInvalid, Unauthorized, UpstreamError, UpstreamTimeout
from ..ids import new_hex
from .base import HOLES, Dialect, StreamRenderer, Template, converted_all, sse, validate
from .wire import openai_chat as wire


def openai_error(err: PolarError) -> dict[str, Any]:
    """OpenAI's error body; shared by Chat Completions and Responses."""
    if isinstance(err, ContextOverflow):
        etype, code, param = "invalid_request_error", "context_length_exceeded", "messages"
    elif isinstance(err, Unauthorized):
        etype, code, param = "authentication_error", "invalid_api_key", None
    elif isinstance(err, RequestInvalid):
        etype, code, param = "invalid_request_error", None, None
    elif isinstance(err, UpstreamTimeout):
        etype, code, param = "timeout", "timeout", None
    elif isinstance(err, UpstreamError):
        etype, code, param = "upstream_error", err.kind, None
    else:
        etype, code, param = "server_error", err.kind, None
    return {"error": {"message": err.message, "type": etype, "param": param, "code": code}}


def _tool_choice(choice: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        if not name:
            raise RequestInvalid("tool_choice: a named choice needs function.name")
        return {"name": name}
    return choice


def _message(m: wire.ChatMessage) -> Message:
    role = "system" if m.role == "developer" else "tool" if m.role == "function" else m.role
    return Message(
        role=role,
        content=m.content if m.content is not None else "",
        reasoning=m.reasoning_content if m.reasoning_content is not None else m.reasoning,
        tool_calls=[ToolCall(t.id, t.function.name, t.function.arguments) for t in m.tool_calls or []],
        tool_call_id=m.tool_call_id,
        name=m.name,
    )


class OpenAIChat(Dialect):
    name = "openai_chat"
    routes = [("/v1/chat/completions", ["POST"]), ("/chat/completions", ["POST"])]
    history = ("messages", wire.ChatMessage)

    def parse_request(self, body: Any, path_params: dict[str, str], query: dict[str, str]) -> ChatRequest:
        req = validate(wire.ChatCompletionRequest, body)
        if req.n not in (None, 1):
            raise RequestInvalid("n: only one choice per call is supported (each call is one sample)")
        extra: dict[str, Any] = {}
        thinking = None
        if req.chat_template_kwargs:
            extra["chat_template_kwargs"] = dict(req.chat_template_kwargs)
            thinking = req.chat_template_kwargs.get("enable_thinking")
        stream_opts = req.stream_options or {}
        return ChatRequest(
            model=req.model,
            messages=converted_all(req.messages, _message),
            tools=[
                Tool(t.function.name, t.function.description or "", t.function.parameters or {})
                for t in req.tools or []
            ],
            tool_choice=_tool_choice(req.tool_choice),
            stream=bool(req.stream),
            max_tokens=req.max_completion_tokens or req.max_tokens,
            temperature=req.temperature,
            top_p=req.top_p,
            top_k=req.top_k,
            stop=[req.stop] if isinstance(req.stop, str) else list(req.stop or []),
            seed=req.seed,
            presence_penalty=req.presence_penalty,
            frequency_penalty=req.frequency_penalty,
            thinking=thinking,
            response_format=req.response_format,
            extra=extra,
            hints={"include_usage": bool(stream_opts.get("include_usage"))},
        )

    def render_response(self, completion: Completion, request: ChatRequest) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": completion.text or None}
        if completion.reasoning:
            message["reasoning_content"] = completion.reasoning
        if completion.tool_calls:
            message["tool_calls"] = [_tool_call(i, t) for i, t in enumerate(completion.tool_calls)]
        return {
            "id": completion.id or _new_id(),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.model,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": completion.finish_reason}],
            "usage": _usage(completion),
        }

    def stream_renderer(self, request: ChatRequest) -> StreamRenderer:
        return _ChatStream(request.model, bool(request.hints.get("include_usage")))

    def render_error(self, err: PolarError) -> dict[str, Any]:
        return openai_error(err)


def _new_id() -> str:
    return "chatcmpl-" + new_hex()


def _tool_call(index: int, t: ToolCall) -> dict[str, Any]:
    return {"index": index, "id": t.id, "type": "function", "function": {"name": t.name, "arguments": t.arguments}}


def _usage(c: Completion) -> dict[str, Any]:
    u = c.usage
    return {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
    }


def _choice(delta: Any, finish_reason: str | None) -> dict[str, Any]:
    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}


class _ChatStream(StreamRenderer):
    def __init__(self, model: str, include_usage: bool):
        self.model = model
        self.include_usage = include_usage
        self.id = _new_id()
        self.created = int(time.time())
        self.started = False
        self.template = Template(self._body([_choice(HOLES[0], None)]))  # every chunk but the last

    def _body(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        if finish_reason is None:
            return self.template.render(delta)
        return sse(self._body([_choice(delta, finish_reason)]))

    def _open(self) -> list[bytes]:
        if self.started:
            return []
        self.started = True
        return [self._chunk({"role": "assistant", "content": ""})]

    def delta(self, delta: Delta) -> list[bytes]:
        out = self._open() if not self.started else []
        if delta.reasoning:
            out.append(self._chunk({"reasoning_content": delta.reasoning}))
        if delta.text:
            out.append(self._chunk({"content": delta.text}))
        if delta.tool_call is not None:
            t = delta.tool_call
            call: dict[str, Any] = {"index": t.index, "function": {"arguments": t.arguments}}
            if t.id is not None:
                call["id"] = t.id
                call["type"] = "function"
            if t.name is not None:
                call["function"]["name"] = t.name
            out.append(self._chunk({"tool_calls": [call]}))
        return out

    def finish(self, completion: Completion) -> list[bytes]:
        out = self._open()
        out.append(self._chunk({}, completion.finish_reason))
        if self.include_usage:
            out.append(sse(self._body([]) | {"usage": _usage(completion)}))
        out.append(b"data: [DONE]\n\n")
        return out

    def error(self, err: PolarError) -> list[bytes]:
        return [sse(openai_error(err)), b"data: [DONE]\n\n"]
