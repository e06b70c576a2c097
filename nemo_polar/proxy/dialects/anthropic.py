"""Anthropic Messages: `POST /v1/messages` (Claude Code sends `?beta=true`, Pi does not).

Request -> canonical:
- `system` (a string or text blocks) becomes one leading system message, blocks joined by a blank
  line. Claude Code's first system block is a billing header (`x-anthropic-billing-header:
  cc_version=...; cch=<hash>;`) whose hash changes on every request; left in, it would make every
  turn's prompt differ from the last in its first tokens, breaking prefix sharing in the engine's
  cache and in trace reconstruction. It carries nothing for the model, so a system block (or string)
  that starts with it loses that line in the canonical request; the native request, and so the
  record, keeps it.
- `role: "system"` entries inside `messages` (Claude Code's mid-conversation-system beta) stay in
  place as system messages.
- User blocks: `tool_result` -> one tool message each (`is_error` marked in the text, images moved
  to the user message that follows, since chat templates render no images in tool turns); text and
  images -> one user message after the tool messages. Assistant blocks: text -> content,
  `tool_use` -> tool calls (arguments = compact JSON of `input`), `thinking` -> reasoning (the
  signature is ours or the harness's to keep; it is never verified), `redacted_thinking` dropped.
- Server tools (no `input_schema`) are dropped: the policy can only call tools the harness runs.
- A trailing assistant message is a prefill: the engine is asked to continue it.

Canonical -> response: thinking block (signature "polar:" + base64 of the reasoning's SHA-256),
text block, tool_use blocks. Tool arguments that are not a JSON object cannot be an `input`; they
are wrapped as `{"_polar_raw_arguments": "<text>"}` so the harness's schema check fails visibly
(the model learns from the tool error) and, when the call comes back in history, the wrapper is
unwrapped to the exact text the model sampled. In a stream, arguments are relayed token by token
once they start with `{` (what engines' tool parsers emit); any other start is held and sent
wrapped when the block closes, so the client's incremental JSON parser never sees garbage (an
object cut short by max_tokens still goes out as sampled: SDKs parse partial JSON leniently).

Errors: `{type: "error", error: {type, message}}`, the type following the HTTP status as Anthropic's
does; a context overflow is worded the way Claude Code recognises (and acts on) it.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import re
from typing import Any

import orjson

from ...chat import ChatRequest, Completion, Delta, Message, Tool, ToolCall, ToolCallDelta
from ...errors import ContextOverflow, PolarError, RequestInvalid
from ..ids import new_hex
from .base import HOLES, Dialect, StreamRenderer, Template, converted, sse, validate
from .wire import anthropic as wire

log = logging.getLogger("nemo_polar.proxy.anthropic")

BILLING_HEADER = "x-anthropic-billing-header:"
RAW_ARGUMENTS = "_polar_raw_arguments"
TOOL_ERROR_MARK = "[tool error] "

_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "content_filter": "refusal"}
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


# --- errors -----------------------------------------------------------------------------------
def anthropic_error(err: PolarError) -> dict[str, Any]:
    """Anthropic's error body; the type follows the HTTP status, as Anthropic's own does."""
    status = err.status_code
    etype = _ERROR_TYPES.get(status) or ("invalid_request_error" if 400 <= status < 500 else "api_error")
    message = _overflow_message(err.message) if isinstance(err, ContextOverflow) else err.message
    return {"type": "error", "error": {"type": etype, "message": message}}


def _number(pattern: str, text: str) -> int | None:
    found = re.search(pattern, text)
    return int(found.group(1)) if found else None


def _overflow_message(upstream: str) -> str:
    """The engine's context-overflow message in the two forms Claude Code parses and acts on:
    "prompt is too long: P tokens > L maximum" (it compacts) and "input length and `max_tokens`
    exceed context limit: P + O > L, ..." (it retries with a smaller max_tokens)."""
    limit = _number(r"maximum context length is (\d+)", upstream)
    prompt = _number(r"(?:prompt contains|request has|resulted in)(?: at least)? (\d+)", upstream)
    prompt = prompt if prompt is not None else _number(r"(\d+) in the messages", upstream)
    output = _number(r"requested (\d+) output tokens", upstream)
    output = output if output is not None else _number(r"(\d+) in the completion", upstream)
    if limit is None or prompt is None or (prompt < limit and output is None):
        return f"prompt is too long: {upstream}"
    if prompt < limit:
        return (
            f"input length and `max_tokens` exceed context limit: {prompt} + {output} > {limit}, "
            "decrease input length or `max_tokens` and try again"
        )
    return f"prompt is too long: {prompt} tokens > {limit} maximum"


# --- request ----------------------------------------------------------------------------------
def _strip_billing(text: str) -> str:
    if not text.startswith(BILLING_HEADER):
        return text
    return text.partition("\n")[2]


def _system(system: str | list[wire.TextBlock] | None) -> list[Message]:
    blocks = [system] if isinstance(system, str) else [b.text for b in system or []]
    text = "\n\n".join(t for t in (_strip_billing(b) for b in blocks) if t)
    return [Message("system", text)] if text else []


def _image_part(block: wire.ImageBlock, where: str) -> dict[str, Any]:
    src = block.source
    if src.type == "base64" and src.data is not None:
        url = f"data:{src.media_type or 'image/png'};base64,{src.data}"
    elif src.type == "url" and src.url:
        url = src.url
    else:
        raise RequestInvalid(f"{where}: image source {src.type!r} is not supported (use base64 or url)")
    return {"type": "image_url", "image_url": {"url": url}}


def _drop(block: Any, where: str) -> None:
    log.debug("anthropic: dropping %s block at %s (no canonical form)", block.type, where)


def _tool_result(block: wire.ToolResultBlock, where: str) -> tuple[Message, list[dict[str, Any]]]:
    """One tool message, and the images it carried (they go to the next user message)."""
    texts: list[str] = []
    images: list[dict[str, Any]] = []
    content = block.content if isinstance(block.content, list) else [block.content or ""]
    for j, part in enumerate(content):
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, wire.TextBlock):
            texts.append(part.text)
        elif isinstance(part, wire.ImageBlock):
            images.append(_image_part(part, f"{where}.content.{j}"))
        else:
            _drop(part, f"{where}.content.{j}")
    text = "\n".join(texts)
    if block.is_error:
        text = TOOL_ERROR_MARK + text  # the harness's flag is invisible to the model otherwise
    return Message("tool", text, tool_call_id=block.tool_use_id), images


def _user(content: list[Any], where: str) -> list[Message]:
    tools: list[Message] = []
    parts: list[dict[str, Any]] = []
    images: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        at = f"{where}.content.{j}"
        if isinstance(block, wire.ToolResultBlock):
            message, carried = _tool_result(block, at)
            tools.append(message)
            images.extend(carried)
        elif isinstance(block, wire.TextBlock):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, wire.ImageBlock):
            parts.append(_image_part(block, at))
        elif isinstance(block, (wire.ToolUseBlock, wire.ThinkingBlock, wire.RedactedThinkingBlock)):
            raise RequestInvalid(f"{at}: {block.type} blocks belong in assistant messages")
        else:
            _drop(block, at)
    parts = images + parts
    # tool results must follow the assistant turn directly; the user's own words come after them
    return tools + ([Message("user", parts or "")] if parts or not tools else [])


def _arguments(tool_input: dict[str, Any]) -> str:
    if set(tool_input) == {RAW_ARGUMENTS} and isinstance(tool_input[RAW_ARGUMENTS], str):
        return tool_input[RAW_ARGUMENTS]  # our own wrapper around arguments that were not an object
    return orjson.dumps(tool_input).decode()


def _assistant(content: list[Any], where: str) -> Message:
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[ToolCall] = []
    for j, block in enumerate(content):
        at = f"{where}.content.{j}"
        if isinstance(block, wire.TextBlock):
            texts.append(block.text)
        elif isinstance(block, wire.ToolUseBlock):
            calls.append(ToolCall(block.id, block.name, _arguments(block.input)))
        elif isinstance(block, wire.ThinkingBlock):
            if block.thinking:
                reasoning.append(block.thinking)
        elif isinstance(block, (wire.ToolResultBlock, wire.ImageBlock)):
            raise RequestInvalid(f"{at}: {block.type} blocks are not allowed in assistant messages")
        else:  # redacted_thinking (opaque to us) and server-tool blocks
            _drop(block, at)
    return Message("assistant", "".join(texts), reasoning="\n\n".join(reasoning) or None, tool_calls=calls)


def _messages(m: wire.MessageParam, i: int) -> list[Message]:
    where = f"messages.{i}"
    if m.role == "system":
        texts = [m.content] if isinstance(m.content, str) else [_system_text(b, where) for b in m.content]
        return [Message("system", "\n\n".join(texts))]
    if isinstance(m.content, str):
        return [Message(m.role, m.content)]
    return _user(m.content, where) if m.role == "user" else [_assistant(m.content, where)]


def _system_text(block: Any, where: str) -> str:
    if not isinstance(block, wire.TextBlock):
        raise RequestInvalid(f"{where}: a system message holds text blocks only, not {block.type}")
    return block.text


def _tools(defs: list[wire.ToolDef] | None) -> list[Tool]:
    tools = []
    for t in defs or []:
        if t.input_schema is None:
            if t.type in (None, "custom"):
                raise RequestInvalid(f"tools: custom tool {t.name!r} needs an input_schema")
            log.debug("anthropic: dropping server tool %s (%s): only harness-run tools can be called", t.name, t.type)
            continue
        tools.append(Tool(t.name, t.description or "", t.input_schema))
    return tools


def _tool_choice(choice: wire.ToolChoice | None) -> str | dict[str, Any] | None:
    if choice is None:
        return None
    if choice.type == "tool":
        if not choice.name:
            raise RequestInvalid("tool_choice: type 'tool' needs a name")
        return {"name": choice.name}
    return {"auto": "auto", "any": "required", "none": "none"}[choice.type]


class Anthropic(Dialect):
    name = "anthropic"
    routes = [("/v1/messages", ["POST"])]
    history = ("messages", wire.MessageParam)

    def parse_request(self, body: Any, path_params: dict[str, str], query: dict[str, str]) -> ChatRequest:
        req = validate(wire.MessagesRequest, body)
        if req.model_extra:
            log.debug("anthropic: ignoring fields %s", sorted(req.model_extra))
        messages = _system(req.system)
        for i, m in enumerate(req.messages):
            messages.extend(converted(m, _messages, i))
        extra: dict[str, Any] = {}
        if req.tool_choice is not None and req.tool_choice.disable_parallel_tool_use:
            extra["parallel_tool_calls"] = False
        if messages[-1].role == "assistant" and not messages[-1].tool_calls:
            # a trailing assistant message is a prefill the answer continues (vLLM's and SGLang's flags)
            extra |= {"continue_final_message": True, "add_generation_prompt": False}
        return ChatRequest(
            model=req.model,
            messages=messages,
            tools=_tools(req.tools),
            tool_choice=_tool_choice(req.tool_choice),
            stream=bool(req.stream),
            max_tokens=req.max_tokens,
            temperature=req.temperature,
            top_p=req.top_p,
            top_k=req.top_k,
            stop=list(req.stop_sequences or []),
            thinking=None if req.thinking is None else req.thinking.type != "disabled",
            extra=extra,
        )

    def render_response(self, completion: Completion, request: ChatRequest) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if completion.reasoning:
            reasoning = completion.reasoning
            content.append({"type": "thinking", "thinking": reasoning, "signature": signature(reasoning)})
        if completion.text:
            content.append({"type": "text", "text": completion.text})
        for t in completion.tool_calls:
            content.append({"type": "tool_use", "id": t.id, "name": t.name, "input": tool_input(t.arguments)})
        return {
            "id": _new_id(),
            "type": "message",
            "role": "assistant",
            "model": request.model,
            "content": content or [{"type": "text", "text": ""}],  # the API never answers an empty list
            "stop_reason": _stop_reason(completion),
            "stop_sequence": None,
            "usage": _usage(completion),
        }

    def stream_renderer(self, request: ChatRequest) -> StreamRenderer:
        return _MessageStream(request.model)

    def render_error(self, err: PolarError) -> dict[str, Any]:
        return anthropic_error(err)


# --- response ---------------------------------------------------------------------------------
def _new_id() -> str:
    return "msg_" + new_hex()


def signature(reasoning: str) -> str:
    """Our thinking signature: opaque to the harness, never verified by us, stable for one text."""
    return "polar:" + base64.b64encode(hashlib.sha256(reasoning.encode()).digest()).decode()


def tool_input(arguments: str) -> dict[str, Any]:
    """A tool call's `input`; arguments that are not a JSON object are wrapped (see the module doc)."""
    if not arguments.strip():
        return {}
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        value = None
    return value if isinstance(value, dict) else {RAW_ARGUMENTS: arguments}


def _stop_reason(c: Completion) -> str:
    if c.tool_calls and c.finish_reason == "stop":
        return "tool_use"
    return _STOP_REASONS.get(c.finish_reason, "end_turn")


def _usage(c: Completion) -> dict[str, Any]:
    u = c.usage
    # Anthropic counts cache reads apart from input_tokens; the prompt's total is their sum
    return {
        "input_tokens": max(u.prompt_tokens - u.cached_tokens, 0),
        "output_tokens": u.completion_tokens,
        "cache_read_input_tokens": u.cached_tokens,
        "cache_creation_input_tokens": 0,
    }


class _MessageStream(StreamRenderer):
    """message_start, then blocks opened on their first delta and closed when the next one opens
    (or at finish), then message_delta and message_stop."""

    def __init__(self, model: str):
        self.model = model
        self.id = _new_id()
        self.started = False
        self.blocks = 0  # blocks opened so far; the open one, if any, is blocks - 1
        self.open: tuple[str, int] | None = None  # (block type, tool call index)
        # the open block's thinking (for its signature) and tool arguments so far, in pieces (`+=` is quadratic)
        self.thinking: list[str] = []
        self.args: list[str] = []
        self.live: bool | None = None  # tool arguments relayed as they come (None: not known yet)
        self.closed_tools: set[int] = set()
        self.block_delta: Template  # the open block's content_block_delta, set when it opens

    def _event(self, data: dict[str, Any]) -> bytes:
        return sse(data, event=data["type"])

    def _start(self) -> list[bytes]:
        if self.started:
            return []
        self.started = True
        usage = {"input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
        return [
            self._event(
                {
                    "type": "message_start",
                    "message": {
                        "id": self.id,
                        "type": "message",
                        "role": "assistant",
                        "model": self.model,
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": usage,
                    },
                }
            )
        ]

    def _block_delta(self, delta: dict[str, Any]) -> bytes:
        return self.block_delta.render(delta)

    def _open(self, kind: str, block: dict[str, Any], tool_index: int = -1) -> list[bytes]:
        if self.open == (kind, tool_index):
            return []
        out = self._close()
        self.open = (kind, tool_index)
        self.blocks += 1
        self.thinking, self.args, self.live = [], [], None
        delta = {"type": "content_block_delta", "index": self.blocks - 1, "delta": HOLES[0]}
        self.block_delta = Template(delta, delta["type"])
        out.append(self._event({"type": "content_block_start", "index": self.blocks - 1, "content_block": block}))
        return out

    def _close(self) -> list[bytes]:
        if self.open is None:
            return []
        kind, tool_index = self.open
        out = []
        if kind == "thinking":
            out.append(self._block_delta({"type": "signature_delta", "signature": signature("".join(self.thinking))}))
        elif kind == "tool_use":
            self.closed_tools.add(tool_index)
            if not self.live:  # held back: send what the client can parse
                out.append(self._json_delta(orjson.dumps(tool_input("".join(self.args))).decode()))
        out.append(self._event({"type": "content_block_stop", "index": self.blocks - 1}))
        self.open = None
        return out

    def _json_delta(self, text: str) -> bytes:
        return self._block_delta({"type": "input_json_delta", "partial_json": text})

    def _tool(self, t: ToolCallDelta) -> list[bytes]:
        if t.index in self.closed_tools:
            # engines stream one call after another; a late piece of a closed block cannot be shown
            log.warning("anthropic: dropping late arguments for tool call %d (its block is closed)", t.index)
            return []
        out: list[bytes] = []
        if self.open != ("tool_use", t.index):
            block = {"type": "tool_use", "id": t.id or "toolu_" + new_hex(), "name": t.name or "", "input": {}}
            out = self._open("tool_use", block, t.index)
        self.args.append(t.arguments)
        if self.live is None and t.arguments.strip():  # the first piece that is not blank decides
            so_far = "".join(self.args)
            self.live = so_far.lstrip().startswith("{")
            if self.live:
                out.append(self._json_delta(so_far))
        elif self.live and t.arguments:
            out.append(self._json_delta(t.arguments))
        return out

    def delta(self, delta: Delta) -> list[bytes]:
        out = self._start()
        if delta.reasoning:
            out += self._open("thinking", {"type": "thinking", "thinking": "", "signature": ""})
            self.thinking.append(delta.reasoning)
            out.append(self._block_delta({"type": "thinking_delta", "thinking": delta.reasoning}))
        if delta.text:
            out += self._open("text", {"type": "text", "text": ""})
            out.append(self._block_delta({"type": "text_delta", "text": delta.text}))
        if delta.tool_call is not None:
            out += self._tool(delta.tool_call)
        return out

    def finish(self, completion: Completion) -> list[bytes]:
        out = self._start() + self._close()
        if self.blocks == 0:  # nothing was generated: still a valid, empty text block
            out += self._open("text", {"type": "text", "text": ""}) + self._close()
        out.append(
            self._event(
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": _stop_reason(completion), "stop_sequence": None},
                    "usage": _usage(completion),
                }
            )
        )
        out.append(self._event({"type": "message_stop"}))
        return out

    def error(self, err: PolarError) -> list[bytes]:
        return [self._event(anthropic_error(err))]
