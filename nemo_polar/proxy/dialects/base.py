"""What a dialect is: the single place one provider API lives.

A dialect parses its request body into the canonical `ChatRequest`, renders a canonical
`Completion` back as its response body, renders a stream as its exact SSE event sequence (through
a `StreamRenderer`, pure state in, bytes out), and renders any `PolarError` as its error body.
Dialect modules import no web framework: the HTTP lives in `proxy/app.py`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from ...chat import ChatRequest, Completion, Delta
from ...errors import PolarError, RequestInvalid, problems

T = TypeVar("T")


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event; `data` is JSON-encoded unless it is already bytes."""
    payload = data if isinstance(data, bytes) else orjson.dumps(data)
    if event is None:
        return b"data: " + payload + b"\n\n"
    return b"event: " + event.encode() + b"\ndata: " + payload + b"\n\n"


class Template:
    """An SSE event encoded once, with holes where its JSON changes between uses (a token's text, a
    sequence number). `render(*values)` gives the bytes `sse` would for the event with `HOLES[i]`
    replaced by `values[i]`, encoding only the values: per-token events are most of a stream's work.
    Holes must appear in `data` in their index order."""

    __slots__ = ("parts",)

    def __init__(self, data: Any, event: str | None = None):
        encoded = remaining = sse(data, event)
        self.parts: list[bytes] = []
        for marker in _MARKERS:
            head, found, tail = remaining.partition(marker)
            if not found:
                break
            self.parts.append(head)
            remaining = tail
        self.parts.append(remaining)
        if encoded.count(_MARK) != len(self.parts) - 1:
            raise ValueError("a template's holes must appear in their index order")

    def render(self, *values: Any) -> bytes:
        parts, dumps = self.parts, orjson.dumps
        if len(values) == 1:  # most events: a token's text (and its sequence number)
            return b"".join((parts[0], dumps(values[0]), parts[1]))
        if len(values) == 2:
            return b"".join((parts[0], dumps(values[0]), parts[1], dumps(values[1]), parts[2]))
        out = [parts[0]]
        for i, value in enumerate(values, 1):
            out += (dumps(value), parts[i])
        return b"".join(out)


HOLES = tuple(f"\x00polar-hole-{i}\x00" for i in range(4))
_MARKERS = tuple(orjson.dumps(h) for h in HOLES)
_MARK = b"polar-hole-"


def converted(item: Any, convert: Callable[..., T], *args: Any) -> T:
    """`convert(item, *args)` of a validated history item, kept on the item (its wire model's `_canonical`): the
    proxy hands a session's unchanged history items on as the same objects call after call
    (proxy/history.py), so each is converted once, and its canonical messages stay the same objects.
    A dialect whose items convert apart from one another uses it; one that walks its history as a
    whole (Gemini's tool call ids, Responses' grouped items) converts every call."""
    kept = item.__pydantic_private__  # the private attributes' own dict: pydantic's __getattr__ costs 2 us
    done = kept.get("_canonical")
    if done is None:
        done = kept["_canonical"] = convert(item, *args)
    return done


def converted_all(items: list[Any], convert: Callable[[Any], T]) -> list[T]:
    """`[converted(item, convert) for item in items]`, without a step per item for the leading ones the last
    call had. What the last call converted to is kept on the first item (a session's history items are its
    own objects, always after the same ones); when the last item the two calls share converted to that
    call's message there, every item before it did too, and that call's messages are taken as a slice.
    The items themselves are not kept: an item holding a list that holds it would be a reference cycle,
    freed only by the cyclic collector, which a busy server runs rarely (serving.py), so every new
    history would stay in memory long after its session closed."""
    if not items:
        return []
    kept = items[0].__pydantic_private__
    last: list[T] | None = kept.get("_run")
    n = min(len(items), len(last)) if last else 0
    if n and items[n - 1].__pydantic_private__.get("_canonical") is last[n - 1]:  # type: ignore[index]
        out = last[:n] + [converted(item, convert) for item in items[n:]]  # type: ignore[index]
    else:
        out = [converted(item, convert) for item in items]
    kept["_run"] = out
    return out


def validate(model: type[BaseModel], body: Any) -> Any:
    """Validate a request body, turning pydantic's report into one readable 400."""
    if not isinstance(body, dict):
        raise RequestInvalid("request body must be a JSON object")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise RequestInvalid(f"invalid request: {'; '.join(problems(exc, limit=5))}") from None


class StreamRenderer(ABC):
    """Turns a streamed turn into one dialect's SSE events. Holds only rendering state."""

    @abstractmethod
    def delta(self, delta: Delta) -> list[bytes]:
        """Events for one piece of the turn; the first call also opens the stream."""

    @abstractmethod
    def finish(self, completion: Completion) -> list[bytes]:
        """Closing events, once the whole turn (finish reason, usage) is known."""

    @abstractmethod
    def error(self, err: PolarError) -> list[bytes]:
        """Events that tell the client the stream failed after it had started."""


class Dialect(ABC):
    name: str
    # (path, methods); paths use Starlette's syntax
    routes: list[tuple[str, list[str]]]
    # the body field a harness re-sends its history in, and the wire model of one item: what is
    # unchanged since the session's last call is not validated again (proxy/history.py)
    history: tuple[str, Any] | None = None

    @abstractmethod
    def parse_request(self, body: Any, path_params: dict[str, str], query: dict[str, str]) -> ChatRequest:
        """Canonical request from this dialect's body; `RequestInvalid` on bad input."""

    @abstractmethod
    def render_response(self, completion: Completion, request: ChatRequest) -> dict[str, Any]:
        """This dialect's non-streaming response body."""

    @abstractmethod
    def stream_renderer(self, request: ChatRequest) -> StreamRenderer: ...

    @abstractmethod
    def render_error(self, err: PolarError) -> dict[str, Any]:
        """This dialect's error body (the HTTP status is `err.status_code`)."""
