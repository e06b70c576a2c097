"""The canonical chat form every dialect translates through (dialect -> canonical -> dialect).

It is deliberately close to OpenAI Chat Completions, because that is what every backend speaks,
but carries only what the project understands; anything a dialect cannot map is kept in
`ChatRequest.extra` for the backend or dropped with a log line, never silently mis-mapped.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import takewhile
from operator import is_
from typing import Any, overload


@dataclass(slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, exactly as sampled or as the harness sent it back


@dataclass(slots=True)
class Message:
    role: str  # system | user | assistant | tool
    content: str | list[dict[str, Any]] = ""  # text, or OpenAI-style parts (text, image_url)
    reasoning: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None
    # its Chat Completions form, built once (backends.base.message_body): a history's unchanged messages
    # are the same objects call after call, and so are the upstream's
    chat_form: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    chat_json: Any = field(default=None, repr=False, compare=False)  # that form's JSON (an orjson.Fragment)
    # on a history's first message: the last upstream body's message forms and their JSON (`backends.base.body_json`)
    chat_run: Any = field(default=None, repr=False, compare=False)

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(p.get("text", "") for p in self.content if p.get("type") == "text")


def same_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    """How many leading items two lists of a session's history (its items, their messages, their forms)
    share as the very same objects. Such an object is only ever seen after the same ones: the proxy
    takes a history's unchanged items from its last call as a prefix (proxy/history.py), and every new
    item is a new object. So when the shorter list's last item is the other's there, so are all before
    it, and nothing else is compared; otherwise they are compared one by one, in C."""
    n = min(len(a), len(b))
    if n and a[n - 1] is b[n - 1]:
        return n
    return len(list(takewhile(bool, map(is_, a, b))))


@dataclass(slots=True)
class Tool:
    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})


@dataclass(slots=True)
class ChatRequest:
    model: str
    messages: list[Message]
    tools: list[Tool] = field(default_factory=list)
    tool_choice: str | dict[str, Any] | None = None  # auto | none | required | {"name": ...}
    stream: bool = False
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    thinking: bool | None = None  # the harness asked for reasoning (None: it did not say)
    response_format: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # passed to the upstream body as is
    hints: dict[str, Any] = field(default_factory=dict)  # what the dialect needs back when rendering


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0


class JoinedIds(Sequence[int]):
    """A prompt's ids as the earlier prompt's ids it begins with (`head`, a list or another
    `JoinedIds`) and the rest (`tail`): what a session's next prompt is, without a new list of every id.
    Slices past the head are the tail's; anything else reads it as one list, built once and kept."""

    __slots__ = ("head", "tail", "_len", "_list")

    def __init__(self, head: Sequence[int], tail: list[int]):
        self.head, self.tail = head, tail
        self._len = len(head) + len(tail)
        self._list: list[int] | None = None

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> list[int]: ...
    def __getitem__(self, i: int | slice) -> int | list[int]:
        n = len(self.head)
        if isinstance(i, slice) and (i.step or 1) == 1:
            start, stop, _ = i.indices(self._len)
            if start >= n:
                return self.tail[start - n : stop - n]
        return self.to_list()[i]

    def __iter__(self) -> Iterator[int]:
        return iter(self.to_list())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, JoinedIds):
            other = other.to_list()
        return isinstance(other, list) and self.to_list() == other

    __hash__ = None  # type: ignore[assignment]  # equal to a list, and as unhashable

    def __repr__(self) -> str:
        return repr(self.to_list())

    def to_list(self) -> list[int]:
        """The ids as one list (the heads walked without recursion: a session's chain is long). Once built,
        it is the whole head: the earlier prompts are let go, or a session's chain would keep every list
        built along it (a 200-turn session held 13 MB of them)."""
        if self._list is None:
            tails, head = [self.tail], self.head
            while isinstance(head, JoinedIds) and head._list is None:
                tails.append(head.tail)
                head = head.head
            out = list(head.to_list() if isinstance(head, JoinedIds) else head)
            for tail in reversed(tails):
                out += tail
            self._list = self.head = out
            self.tail = []
        return self._list


def as_list(ids: Sequence[int]) -> list[int]:
    """`ids` as a list, for what serialises them (JSON, pydantic): a list as it is."""
    if isinstance(ids, list):
        return ids
    return ids.to_list() if isinstance(ids, JoinedIds) else list(ids)


@dataclass(slots=True)
class Completion:
    """One assistant turn as the inference server produced it, tokens included."""

    text: str = ""
    reasoning: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str = "stop"  # stop | length | tool_calls | content_filter
    # a list, or (a long session's prompt, as the proxy read it) `JoinedIds`: `as_list` to serialise them
    prompt_token_ids: Sequence[int] = field(default_factory=list)
    completion_token_ids: list[int] = field(default_factory=list)
    completion_logprobs: list[float] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    id: str = ""
    policy_version: str | None = None  # the weights that sampled it, when the server says (SGLang's weight_version)

    def message_dict(self) -> dict[str, Any]:
        return {
            "content": self.text,
            "reasoning": self.reasoning,
            "tool_calls": [{"id": t.id, "name": t.name, "arguments": t.arguments} for t in self.tool_calls],
        }


@dataclass(slots=True)
class ToolCallDelta:
    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(slots=True)
class Delta:
    """A piece of a streamed turn, as it arrives from the upstream."""

    text: str = ""
    reasoning: str = ""
    tool_call: ToolCallDelta | None = None


def merged(deltas: list[Delta]) -> list[Delta]:
    """Each run of pieces that continue one another (text, reasoning, one tool call's arguments) as one
    piece: what one read of the upstream brought reaches the harness as one event of each kind, not one
    per token (an inference server's `stream_interval` does the same). A slow upstream's read holds one
    token, and nothing changes; a busy one's holds many, and the harness parses fewer events. The pieces
    are the caller's: the first of each run is extended in place."""
    if len(deltas) < 2:
        return deltas
    out = [deltas[0]]
    run = [_piece(deltas[0])]
    for d in deltas[1:]:
        if _continues(out[-1], d):
            run.append(_piece(d))
            continue
        if len(run) > 1:
            _extend(out[-1], run)
        out.append(d)
        run = [_piece(d)]
    if len(run) > 1:
        _extend(out[-1], run)
    return out


def _continues(first: Delta, d: Delta) -> bool:
    t = d.tool_call
    return _kind(d) == _kind(first) and (t is None or t.id is None and t.name is None)  # a call's start starts a run


def _kind(d: Delta) -> object:
    """What a piece is a piece of; a mixed piece is a kind of its own."""
    t = d.tool_call
    if t is not None:
        return object() if d.text or d.reasoning else t.index
    if d.text and d.reasoning:
        return object()
    return "text" if d.text else "reasoning"


def _piece(d: Delta) -> str:
    return d.tool_call.arguments if d.tool_call is not None else d.text or d.reasoning


def _extend(d: Delta, run: list[str]) -> None:
    joined = "".join(run)
    if d.tool_call is not None:
        d.tool_call.arguments = joined
    elif d.text:
        d.text = joined
    else:
        d.reasoning = joined
