"""OpenAI Responses output: a canonical `Completion` as the response object, or as the streamed events.

A reasoning item (full text as its one summary part, plus our encrypted content), a message item,
one function_call item per call; `incomplete` with `max_output_tokens` when the turn hit the token
limit. The response object does not repeat the request's instructions and tools (the API does; no
client reads them back, and Codex's tools are about 40 KB, which would ride on three events per
turn). Streaming opens an item at its first delta and closes it when another item starts or the
turn ends, with the API's exact event sequence.

Reasoning we return carries `encrypted_content = "polar:" + base64(text)`; the request side
(`openai_responses.py`) decodes it exactly when a harness replays it (`decode_reasoning`).
"""

from __future__ import annotations

import base64
import binascii
import logging
import time
from typing import Any

from ...chat import ChatRequest, Completion, Delta, ToolCall, ToolCallDelta
from ...errors import ContextOverflow, PolarError, RequestInvalid
from ..ids import new_hex
from .base import HOLES, StreamRenderer, Template, sse
from .openai_chat import openai_error

log = logging.getLogger("nemo_polar.proxy.dialects.openai_responses")

REASONING_PREFIX = "polar:"
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


def _new_id(prefix: str) -> str:
    return f"{prefix}_{new_hex()}"


def render_response(c: Completion, request: ChatRequest) -> dict[str, Any]:
    """The (non-streaming) response object of a finished turn."""
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


def stream_renderer(request: ChatRequest) -> StreamRenderer:
    return _ResponsesStream(_Frame(request), request.hints.get("namespaced", {}))


# --- items and the response object ------------------------------------------------------------
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


# --- the stream ---------------------------------------------------------------------------------
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

    def _piece(self, text: str) -> bytes:
        """The open item's next piece of text or arguments, kept and sent as its delta event."""
        self.buf.append(text)
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

    def _text(self, kind: str, text: str) -> list[bytes]:
        """A piece of reasoning or message text (`kind`), opening its item and the item's one part first."""
        out = [] if self.kind == kind else self._open_text(kind)
        out.append(self._piece(text))
        return out

    def _open_text(self, kind: str) -> list[bytes]:
        if kind == "reasoning":
            out = self._open(kind, "rs", {"type": "reasoning", "summary": [], "status": "in_progress"})
            added, index, delta = (
                "response.reasoning_summary_part.added",
                "summary_index",
                "response.reasoning_summary_text.delta",
            )
            part: dict[str, Any] = {"type": "summary_text", "text": ""}
        else:
            out = self._open(
                kind, "msg", {"type": "message", "status": "in_progress", "role": "assistant", "content": []}
            )
            added, index, delta = "response.content_part.added", "content_index", "response.output_text.delta"
            part = _text_part("")
        out.append(self._event(added, **self._ids(), **{index: 0}, part=part))
        self._delta_event(delta, **{index: 0})
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
            out.append(self._piece(t.arguments))
        return out

    def delta(self, delta: Delta) -> list[bytes]:
        out = self._start() if not self.started else []
        if delta.reasoning:
            out += self._text("reasoning", delta.reasoning)
        if delta.text:
            out += self._text("message", delta.text)
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
