"""OpenAI Responses: `POST /v1/responses` (Codex CLI, Pi's openai-responses provider).

Request -> canonical:
- `instructions` and `developer`/`system` messages become system messages; `input` as a string is one
  user message. An assistant turn arrives as several items (reasoning, message, function_call...);
  they are folded back into one assistant message, in order, so the upstream sees the turn the model
  produced: reasoning attaches to the next assistant message, consecutive calls merge.
- Reasoning we returned carries `encrypted_content = "polar:" + base64(text)` and is decoded exactly
  when replayed. Anyone else's encrypted content is kept opaque (never decoded, not an error): the
  item's visible text (`content`, else `summary`) is used.
- Tools: function tools map as is; the function tools inside a `namespace` tool (Codex's
  `multi_agent_v1`) are offered flat as `<namespace>__<name>` (`mcp__srv__` + `tool` when the
  namespace already ends in `__`), and a call to one is reported back as `name` + `namespace`, which is
  how Codex routes it. Server-side tools (web_search, file_search, ...) run at OpenAI, not in the
  harness, so they are dropped with a debug line.
- `reasoning`: absent or null -> thinking not specified; `effort: "none"` -> thinking off; any other
  reasoning object (Codex sends `{summary: "auto"}`, maybe with an effort) -> thinking on.
- Nothing is stored server-side whatever `store` says, so `previous_response_id`, `conversation`,
  stored `prompt`s and `item_reference` items cannot be resolved and are refused (400).

Canonical -> response: a reasoning item (full text as its one summary part, plus our encrypted
content), a message item, one function_call item per call; `incomplete` with
`max_output_tokens` when the turn hit the token limit. The response object does not repeat the
request's instructions and tools (the API does; no client reads them back, and Codex's tools are
about 40 KB, which would ride on three events per turn). Streaming opens an item at its first delta
and closes it when another item starts or the turn ends, with the API's exact event sequence.
"""

from __future__ import annotations

import base64
import binascii
import logging
import time
from typing import Any

from ...chat import ChatRequest, Completion, Delta, Message, Tool, ToolCall, ToolCallDelta
from ...errors import ContextOverflow, PolarError, RequestInvalid
from ..ids import new_hex
from .base import HOLES, Dialect, StreamRenderer, Template, sse, validate
from .openai_chat import openai_error
from .wire import openai_responses as wire

log = logging.getLogger("nemo_polar.proxy.dialects.openai_responses")

REASONING_PREFIX = "polar:"
# tools OpenAI runs on its side; the harness never executes them, so the model cannot have them here
_SERVER_TOOLS = ("web_search", "file_search", "code_interpreter", "image_generation", "computer_use", "mcp")
_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def encode_reasoning(text: str) -> str:
    return REASONING_PREFIX + base64.b64encode(text.encode()).decode()


def decode_reasoning(blob: str) -> str | None:
    """The reasoning text in one of our blobs; None for anyone else's (kept opaque)."""
    if not blob.startswith(REASONING_PREFIX):
        return None
    try:
        return base64.b64decode(blob[len(REASONING_PREFIX) :], validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise RequestInvalid(
            "reasoning item: encrypted_content starts with 'polar:' but is not ours (corrupt)"
        ) from None


def flat_name(namespace: str, name: str) -> str:
    return namespace + name if namespace.endswith("__") else f"{namespace}__{name}"


def _new_id(prefix: str) -> str:
    return f"{prefix}_{new_hex()}"


# --- request: content and items ----------------------------------------------------------------
def _parts(parts: list[Any], where: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in parts:
        if isinstance(p, (wire.InputText, wire.OutputText)):
            out.append({"type": "text", "text": p.text})
        elif isinstance(p, wire.Refusal):
            out.append({"type": "text", "text": p.refusal})
        elif isinstance(p, wire.InputImage):
            if not p.image_url:
                raise RequestInvalid(
                    f"{where}: input_image needs image_url (file ids need storage this server does not keep)"
                )
            image: dict[str, Any] = {"url": p.image_url}
            if p.detail:
                image["detail"] = p.detail
            out.append({"type": "image_url", "image_url": image})
        else:
            raise RequestInvalid(f"{where}: input_file parts are not supported")
    return out


def _content(parts: list[Any], where: str) -> str | list[dict[str, Any]]:
    """Canonical content: a string when it is (at most) one text part, else OpenAI-style parts."""
    out = _parts(parts, where)
    if not out:
        return ""
    if len(out) == 1 and out[0]["type"] == "text":
        return out[0]["text"]
    return out


def _reasoning_text(item: wire.ReasoningItem) -> str:
    if item.encrypted_content:
        mine = decode_reasoning(item.encrypted_content)
        if mine is not None:
            return mine
        log.debug("reasoning item with foreign encrypted_content: kept opaque, its visible text is used")
    if item.content:
        return "".join(c.text for c in item.content)
    return "\n\n".join(s.text for s in item.summary)


class _History:
    """Folds Responses items into canonical messages; one pending assistant turn at a time."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.turn: Message | None = None

    def flush(self) -> None:
        if self.turn is not None:
            self.messages.append(self.turn)
            self.turn = None

    def add(self, message: Message) -> None:
        self.flush()
        self.messages.append(message)

    def assistant(self, *, fresh: bool) -> Message:
        """The pending assistant turn; `fresh` starts a new one if this one already has output."""
        if self.turn is not None and fresh and (self.turn.content or self.turn.tool_calls):
            self.flush()
        if self.turn is None:
            self.turn = Message(role="assistant", content="")
        return self.turn

    def reasoning(self, text: str) -> None:
        if text:
            turn = self.assistant(fresh=True)
            turn.reasoning = f"{turn.reasoning}\n\n{text}" if turn.reasoning else text

    def text(self, text: str) -> None:
        self.assistant(fresh=True).content = text

    def call(self, call: ToolCall) -> None:
        self.assistant(fresh=False).tool_calls.append(call)


def _messages(req: wire.ResponsesRequest) -> list[Message]:
    h = _History()
    if req.instructions:
        h.add(Message(role="system", content=req.instructions))
    for i, item in enumerate(req.input or []):
        where = f"input.{i}"
        if isinstance(item, wire.MessageItem):
            if item.role == "assistant":
                h.text("".join(p["text"] for p in _parts(item.content, where) if p["type"] == "text"))
            else:
                role = "system" if item.role == "developer" else item.role
                h.add(Message(role=role, content=_content(item.content, where)))
        elif isinstance(item, wire.ReasoningItem):
            h.reasoning(_reasoning_text(item))
        elif isinstance(item, wire.FunctionCallItem):
            name = flat_name(item.namespace, item.name) if item.namespace else item.name
            h.call(ToolCall(item.call_id, name, item.arguments))
        elif isinstance(item, wire.FunctionCallOutputItem):
            h.add(Message(role="tool", content=_content(item.output, where), tool_call_id=item.call_id))
        elif item.type == "item_reference":
            raise RequestInvalid(
                f"{where}: item_reference needs stored items; this server stores nothing, send the item itself"
            )
        else:
            log.warning("%s: dropped a %r item (not something the model can be shown)", where, item.type)
    h.flush()
    if not h.messages:
        raise RequestInvalid("input: no messages to send (give input or instructions)")
    return h.messages


# --- request: tools and options ----------------------------------------------------------------
def _tool(name: str, t: wire.FunctionTool) -> Tool:
    return Tool(name, t.description or "", t.parameters or {"type": "object", "properties": {}})


def _tools(defs: list[Any]) -> tuple[list[Tool], dict[str, list[str]]]:
    """Canonical tools, and {flat name: [namespace, name]} for the namespaced ones."""
    tools: list[Tool] = []
    spaced: dict[str, list[str]] = {}
    for d in defs:
        if isinstance(d, wire.FunctionTool):
            tools.append(_tool(d.name, d))
        elif isinstance(d, wire.NamespaceTool):
            for t in d.tools:
                if isinstance(t, wire.FunctionTool):
                    flat = flat_name(d.name, t.name)
                    spaced[flat] = [d.name, t.name]
                    tools.append(_tool(flat, t))
                else:
                    log.warning(
                        "tools: dropped a %r tool inside namespace %r (only function tools are offered)",
                        t.type,
                        d.name,
                    )
        elif d.type.startswith(_SERVER_TOOLS):
            log.debug("tools: dropped the server-side %r tool (OpenAI runs it, not the harness)", d.type)
        else:
            log.warning("tools: dropped a %r tool (only function tools are offered to the model)", d.type)
    seen: set[str] = set()
    for t in tools:
        if t.name in seen:
            raise RequestInvalid(
                f"tools: more than one tool is named {t.name!r} (namespaces are flattened as ns__name)"
            )
        seen.add(t.name)
    return tools, spaced


def _tool_choice(choice: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    if choice is None:
        return None
    if isinstance(choice, str):
        if choice not in ("auto", "none", "required"):
            raise RequestInvalid(f"tool_choice: {choice!r} is not one of auto, none, required")
        return choice
    kind = choice.get("type")
    if kind == "function":
        name, namespace = choice.get("name"), choice.get("namespace")
        if not isinstance(name, str) or not name:
            raise RequestInvalid("tool_choice: a function choice needs a name")
        return {"name": flat_name(namespace, name) if isinstance(namespace, str) and namespace else name}
    if kind == "allowed_tools":
        log.debug("tool_choice: allowed_tools narrows nothing here; its mode is kept")
        mode = choice.get("mode", "auto")
        return mode if mode in ("auto", "required") else "auto"
    raise RequestInvalid(f"tool_choice: {kind!r} tools are not offered here (only function tools reach the model)")


def _thinking(r: wire.ReasoningConfig | None) -> bool | None:
    if r is None:
        return None
    return r.effort != "none"


def _response_format(text: wire.TextConfig | None) -> dict[str, Any] | None:
    f = text.format if text else None
    if f is None or f.type == "text":
        return None
    if f.type == "json_object":
        return {"type": "json_object"}
    if f.schema_ is None:
        raise RequestInvalid("text.format: a json_schema format needs a schema")
    schema: dict[str, Any] = {"name": f.name or "response", "schema": f.schema_}
    if f.description is not None:
        schema["description"] = f.description
    if f.strict is not None:
        schema["strict"] = f.strict
    return {"type": "json_schema", "json_schema": schema}


def _refuse_stateful(req: wire.ResponsesRequest) -> None:
    stored = "this server never stores responses or conversations: send the whole conversation in input"
    if req.previous_response_id:
        raise RequestInvalid(f"previous_response_id: {stored}")
    if req.conversation:
        raise RequestInvalid(f"conversation: {stored}")
    if req.prompt:
        raise RequestInvalid("prompt: stored prompt templates are not supported; send instructions and input")
    if req.background:
        raise RequestInvalid("background: background responses need storage; call without background")


def _echo(req: wire.ResponsesRequest) -> dict[str, Any]:
    """The request settings the response object repeats (the API's shape; small fields only)."""
    return {
        "max_output_tokens": req.max_output_tokens,
        "metadata": req.metadata or {},
        "parallel_tool_calls": True if req.parallel_tool_calls is None else req.parallel_tool_calls,
        "prompt_cache_key": req.prompt_cache_key,
        "reasoning": req.reasoning.model_dump(exclude_none=False)
        if req.reasoning
        else {"effort": None, "summary": None},
        "temperature": req.temperature,
        "text": req.text.model_dump(by_alias=True, exclude_none=True) if req.text else {"format": {"type": "text"}},
        "tool_choice": req.tool_choice if req.tool_choice is not None else "auto",
        "top_p": req.top_p,
    }


class OpenAIResponses(Dialect):
    name = "openai_responses"
    routes = [("/v1/responses", ["POST"]), ("/responses", ["POST"])]
    history = ("input", wire.InputItem)

    def parse_request(self, body: Any, path_params: dict[str, str], query: dict[str, str]) -> ChatRequest:
        req = validate(wire.ResponsesRequest, body)
        _refuse_stateful(req)
        if req.model_extra:
            log.debug("ignored request fields: %s", sorted(req.model_extra))
        tools, spaced = _tools(req.tools or [])
        return ChatRequest(
            model=req.model,
            messages=_messages(req),
            tools=tools,
            tool_choice=_tool_choice(req.tool_choice),
            stream=bool(req.stream),
            max_tokens=req.max_output_tokens,
            temperature=req.temperature,
            top_p=req.top_p,
            thinking=_thinking(req.reasoning),
            response_format=_response_format(req.text),
            hints={"namespaced": spaced, "echo": _echo(req)},
        )

    def render_response(self, completion: Completion, request: ChatRequest) -> dict[str, Any]:
        c = completion
        status, incomplete = _status(c)
        spaced = request.hints.get("namespaced", {})
        output: list[dict[str, Any]] = []
        if c.reasoning:
            output.append(_reasoning_item(_new_id("rs"), c.reasoning, "completed"))
        if c.text:
            output.append(_message_item(_new_id("msg"), c.text, "completed"))
        output += [_call_item(_new_id("fc"), t, spaced, "completed") for t in c.tool_calls]
        if output and status == "incomplete":
            output[-1]["status"] = "incomplete"  # the item the limit cut
        return _Frame(request).response(status, output, usage=_usage(c), incomplete=incomplete)

    def stream_renderer(self, request: ChatRequest) -> StreamRenderer:
        return _ResponsesStream(_Frame(request), request.hints.get("namespaced", {}))

    def render_error(self, err: PolarError) -> dict[str, Any]:
        body = openai_error(err)
        if isinstance(err, ContextOverflow):
            body["error"]["param"] = "input"
        return body


# --- response: items and the response object ---------------------------------------------------
def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _reasoning_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": text}],
        "encrypted_content": encode_reasoning(text),
        "status": status,
    }


def _message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    return {"id": item_id, "type": "message", "status": status, "role": "assistant", "content": [_text_part(text)]}


def _call_item(item_id: str, call: ToolCall, spaced: dict[str, list[str]], status: str) -> dict[str, Any]:
    item = {
        "id": item_id,
        "type": "function_call",
        "status": status,
        "call_id": call.id,
        "name": call.name,
        "arguments": call.arguments,
    }
    if call.name in spaced:  # Codex routes a namespaced tool by both fields
        item["namespace"], item["name"] = spaced[call.name]
    return item


def _status(c: Completion) -> tuple[str, dict[str, str] | None]:
    reason = _INCOMPLETE.get(c.finish_reason)
    return ("incomplete", {"reason": reason}) if reason else ("completed", None)


def _usage(c: Completion) -> dict[str, Any]:
    u = c.usage
    return {
        "input_tokens": u.prompt_tokens,
        "input_tokens_details": {"cached_tokens": u.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": u.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},  # the upstream does not split them out
        "total_tokens": u.prompt_tokens + u.completion_tokens,
    }


def _failure(err: PolarError) -> dict[str, Any]:
    """A failed response's `error`.

    Codex reads `context_length_exceeded` as a full context, anything else as retryable."""
    detail = openai_error(err)["error"]
    code = "context_length_exceeded" if isinstance(err, ContextOverflow) else "server_error"
    return {"code": code, "message": err.message, "type": detail["type"], "param": None}


class _Frame:
    """One response's identity and echoed settings, shared by every snapshot of it."""

    def __init__(self, request: ChatRequest):
        self.id = _new_id("resp")
        self.created_at = int(time.time())
        self.model = request.model
        self.echo = request.hints.get("echo", {})

    def response(
        self,
        status: str,
        output: list[dict[str, Any]],
        *,
        usage: dict[str, Any] | None = None,
        incomplete: dict[str, str] | None = None,
        error: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "background": False,
            "error": error,
            "incomplete_details": incomplete,
            "instructions": None,
            "model": self.model,
            "output": output,
            "previous_response_id": None,
            "service_tier": "default",
            "store": False,
            "tools": [],
            "truncation": "disabled",
            "usage": usage,
            "user": None,
        }
        body.update(self.echo)
        if status in ("completed", "incomplete"):
            body["completed_at"] = int(time.time())
        return body


class _ResponsesStream(StreamRenderer):
    """The Responses event sequence; one output item is open at a time."""

    def __init__(self, frame: _Frame, spaced: dict[str, list[str]]):
        self.frame = frame
        self.spaced = spaced
        self.seq = 0
        self.started = False
        self.output: list[dict[str, Any]] = []
        self.kind: str | None = None  # reasoning | message | call: the open item
        self.index = 0  # its output_index
        self.item_id = ""
        self.buf: list[str] = []  # its text or arguments so far, in pieces (joined once: `+=` is quadratic)
        self.call = ToolCall("", "", "")
        self.call_index: int | None = None  # the upstream tool-call index it renders
        self.closed_calls: set[int] = set()
        self.delta_template: Template  # the open item's delta event

    def _event(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, **fields, "sequence_number": self.seq}
        self.seq += 1
        return sse(data, event=kind)

    def _ids(self) -> dict[str, Any]:
        return {"item_id": self.item_id, "output_index": self.index}

    def _delta_event(self, kind: str, **fields: Any) -> None:
        """The open item's delta event (`kind`), encoded once; `fields` come before `delta`."""
        data = {"type": kind, **self._ids(), **fields, "delta": HOLES[0]}
        if kind == "response.output_text.delta":
            data["logprobs"] = []
        self.delta_template = Template(data | {"sequence_number": HOLES[1]}, kind)

    def _delta(self, text: str) -> bytes:
        self.seq += 1
        return self.delta_template.render(text, self.seq - 1)

    def _start(self) -> list[bytes]:
        if self.started:
            return []
        self.started = True
        snapshot = self.frame.response("in_progress", [])
        return [
            self._event("response.created", response=snapshot),
            self._event("response.in_progress", response=snapshot),
        ]

    def _open(self, kind: str, prefix: str, added: dict[str, Any]) -> list[bytes]:
        out = self._close("completed")
        self.kind, self.item_id, self.buf = kind, _new_id(prefix), []
        self.index = len(self.output)
        item = {"id": self.item_id, **added}
        self.output.append(item)
        out.append(self._event("response.output_item.added", output_index=self.index, item=item))
        return out

    def _final_item(self, status: str, text: str) -> dict[str, Any]:
        if self.kind == "reasoning":
            return _reasoning_item(self.item_id, text, status)
        if self.kind == "message":
            return _message_item(self.item_id, text, status)
        return _call_item(self.item_id, ToolCall(self.call.id, self.call.name, text), self.spaced, status)

    def _close(self, status: str) -> list[bytes]:
        if self.kind is None:
            return []
        ids, text = self._ids(), "".join(self.buf)
        if self.kind == "reasoning":
            out = [
                self._event("response.reasoning_summary_text.done", **ids, summary_index=0, text=text),
                self._event(
                    "response.reasoning_summary_part.done",
                    **ids,
                    summary_index=0,
                    part={"type": "summary_text", "text": text},
                ),
            ]
        elif self.kind == "message":
            out = [
                self._event("response.output_text.done", **ids, content_index=0, text=text, logprobs=[]),
                self._event("response.content_part.done", **ids, content_index=0, part=_text_part(text)),
            ]
        else:
            out = [self._event("response.function_call_arguments.done", **ids, arguments=text)]
            self.closed_calls.add(self.call_index)  # type: ignore[arg-type]
        item = self.output[self.index] = self._final_item(status, text)
        out.append(self._event("response.output_item.done", output_index=self.index, item=item))
        self.kind = self.call_index = None
        return out

    def _reasoning(self, text: str) -> list[bytes]:
        out: list[bytes] = []
        if self.kind != "reasoning":
            out += self._open("reasoning", "rs", {"type": "reasoning", "summary": [], "status": "in_progress"})
            out.append(
                self._event(
                    "response.reasoning_summary_part.added",
                    **self._ids(),
                    summary_index=0,
                    part={"type": "summary_text", "text": ""},
                )
            )
            self._delta_event("response.reasoning_summary_text.delta", summary_index=0)
        self.buf.append(text)
        out.append(self._delta(text))
        return out

    def _text(self, text: str) -> list[bytes]:
        out: list[bytes] = []
        if self.kind != "message":
            out += self._open(
                "message", "msg", {"type": "message", "status": "in_progress", "role": "assistant", "content": []}
            )
            out.append(self._event("response.content_part.added", **self._ids(), content_index=0, part=_text_part("")))
            self._delta_event("response.output_text.delta", content_index=0)
        self.buf.append(text)
        out.append(self._delta(text))
        return out

    def _tool_call(self, t: ToolCallDelta) -> list[bytes]:
        out: list[bytes] = []
        if self.kind != "call" or self.call_index != t.index:
            if t.index in self.closed_calls:  # the upstream went back to a finished call: nothing valid to send
                log.warning(
                    "tool call %d got arguments after its item was closed; they are in the record only", t.index
                )
                return []
            call = ToolCall(t.id or f"call_{t.index}", t.name or "", "")
            added = _call_item("", call, self.spaced, "in_progress")
            del added["id"]
            out += self._open("call", "fc", added)
            self.call, self.call_index = call, t.index
            self._delta_event("response.function_call_arguments.delta")
        if t.arguments:
            self.buf.append(t.arguments)
            out.append(self._delta(t.arguments))
        return out

    def delta(self, delta: Delta) -> list[bytes]:
        out = self._start() if not self.started else []
        if delta.reasoning:
            out += self._reasoning(delta.reasoning)
        if delta.text:
            out += self._text(delta.text)
        if delta.tool_call is not None:
            out += self._tool_call(delta.tool_call)
        return out

    def finish(self, completion: Completion) -> list[bytes]:
        out = self._start()
        status, incomplete = _status(completion)
        out += self._close(status)
        response = self.frame.response(status, self.output, usage=_usage(completion), incomplete=incomplete)
        out.append(self._event(f"response.{status}", response=response))
        return out

    def error(self, err: PolarError) -> list[bytes]:
        out = self._start()
        if self.kind is not None:  # the open item is cut short: shown as it stood, never closed
            self.output[self.index] = self._final_item("incomplete", "".join(self.buf))
        response = self.frame.response("failed", self.output, error=_failure(err))
        out.append(self._event("response.failed", response=response))
        return out
