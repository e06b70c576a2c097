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

Canonical -> response, and the stream's events: `openai_responses_output.py`.
"""

from __future__ import annotations

import logging
from typing import Any

from ...chat import ChatRequest, Completion, Message, Tool, ToolCall
from ...errors import ContextOverflow, PolarError, RequestInvalid
from .base import Dialect, StreamRenderer, validate
from .openai_chat import openai_error
from .openai_responses_output import decode_reasoning, render_response, stream_renderer
from .wire import openai_responses as wire

log = logging.getLogger("nemo_polar.proxy.dialects.openai_responses")

# tools OpenAI runs on its side; the harness never executes them, so the model cannot have them here
_SERVER_TOOLS = ("web_search", "file_search", "code_interpreter", "image_generation", "computer_use", "mcp")


def flat_name(namespace: str, name: str) -> str:
    return namespace + name if namespace.endswith("__") else f"{namespace}__{name}"


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
        return render_response(completion, request)

    def stream_renderer(self, request: ChatRequest) -> StreamRenderer:
        return stream_renderer(request)

    def render_error(self, err: PolarError) -> dict[str, Any]:
        body = openai_error(err)
        if isinstance(err, ContextOverflow):
            body["error"]["param"] = "input"
        return body
