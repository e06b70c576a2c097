"""A session's history, read once: a harness re-sends every earlier message on each call, and only the
bytes that changed since its last call are parsed and validated again.

A dialect names the body field that holds its history and the wire model of one item
(`Dialect.history`, e.g. `("messages", ChatMessage)`). Per session the proxy keeps the previous call's
body as sent, where its history array opens and where each item ends, and the items parsed and
validated. The next body is compared with it byte for byte: the leading items whose bytes are
unchanged are taken as they were (the same objects: what the record keeps is exactly what was sent,
and the store recognises them without serialising them again), and only the rest of the body (the
history without those items) is parsed. The new items' ends are found with the standard library's
scanner over the new bytes alone. Anything that does not read as expected (a body that is not an
object, the field named twice, whitespace where an item ended) falls back to parsing the whole body.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import TypeAdapter, ValidationError

from ..errors import RequestInvalid
from ..session_cache import SessionCache
from .dialects import Dialect

_PART = "history"  # in the session cache: dropped when the session closes, or to stay under its bound
# bytes charged per byte of a kept body: the body, its items' strings, and their JSON kept on the converted
# messages (`dialects.base.converted`, `chat.Message.chat_json`)
_CHARGE = 3
_SMALL = 16384  # a body this short is parsed whole: comparing and scanning it would cost more than that
_SCAN = json.JSONDecoder()  # its raw_decode finds where a JSON value ends, in C
_WS = " \t\n\r"


@dataclass(frozen=True)
class Seen:
    """One call's body and history: where the array opens, where each item ends, the items as parsed
    and as validated (an item the wire model refused stays as parsed)."""

    dialect: str
    raw: bytes
    opened: int
    ends: list[int]
    sent: list[Any]
    valid: list[Any]


@dataclass(frozen=True)
class Parsed:
    native: Any  # the body as sent, parsed: what the record keeps
    body: Any  # the same with history items validated where they were last call: what the dialect reads
    fresh: Any  # what was parsed now: the body without the items taken from last call (walked for depth)
    seen: Seen | None  # what to `keep` once the call parsed
    kept: int = 0  # history items taken from last call


class Histories:
    def __init__(self, cache: SessionCache | None = None, small: int = _SMALL):
        self._cache = cache if cache is not None else SessionCache()
        self._small = small
        self._adapters: dict[str, TypeAdapter] = {}

    def parse(self, session_id: str, dialect: Dialect, raw: bytes) -> Parsed:
        """`raw` parsed; a 400 when it is not JSON."""
        field = dialect.history[0] if dialect.history is not None and len(raw) >= self._small else None
        before = self._cache.get(_PART, session_id) if field is not None else None
        if field is not None and before is not None and before.dialect == dialect.name:
            kept = _unchanged(raw, before)
            parsed = _partial(raw, before, kept, field) if kept else None
            if parsed is not None:
                return parsed
        native = loads(raw)
        items = native.get(field) if field is not None and isinstance(native, dict) else None
        located = _locate(raw, field, len(items)) if isinstance(items, list) else None
        if located is None:
            return Parsed(native, native, native, None)
        opened, ends = located
        valid = list(items)
        return Parsed(native, native | {field: valid}, native, Seen(dialect.name, raw, opened, ends, items, valid))

    def validate(self, dialect: Dialect, parsed: Parsed) -> None:
        """Validate, in place, the history items of `parsed.body` not taken from the last call."""
        if parsed.seen is None or dialect.history is None:
            return
        field, item = dialect.history
        adapter = self._adapters.get(dialect.name)
        if adapter is None:
            adapter = self._adapters[dialect.name] = TypeAdapter(item)
        out = parsed.body[field]
        for i in range(parsed.kept, len(out)):
            try:
                out[i] = adapter.validate_python(out[i])
            except ValidationError:
                pass  # left as sent: the dialect's validation of the whole body says what is wrong

    def keep(self, session_id: str, seen: Seen) -> None:
        """The call parsed: its history is what the session's next call is compared with."""
        self._cache.put(_PART, session_id, seen, _CHARGE * len(seen.raw))


def loads(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RequestInvalid(f"request body is not valid JSON: {exc}") from None


def _unchanged(raw: bytes, before: Seen) -> int:
    """How many leading history items `raw` has byte for byte as `before` had them (and all that came
    before them in the body). One comparison when the history only grew; else a halving search."""
    ends, last = before.ends, memoryview(before.raw)

    def same(k: int) -> bool:  # one memcmp, nothing copied
        return k == 0 or raw.startswith(last[: ends[k - 1]])

    k = len(ends)
    if not same(k):
        lo, hi = 0, k - 1  # same(lo) holds; the answer is at most hi
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if same(mid) else (lo, mid - 1)
        k = lo
    while k and raw[ends[k - 1] : ends[k - 1] + 1] not in (b",", b"]"):  # an item that goes on is not the same
        k -= 1
    return k


def _partial(raw: bytes, before: Seen, k: int, field: str) -> Parsed | None:
    """`raw` parsed without its first `k` history items (taken from `before`), or None when the rest
    does not read as the same body with new items."""
    cut = before.ends[k - 1]
    rest = raw[cut + 1 :] if raw[cut : cut + 1] == b"," else raw[cut:]
    try:
        native = orjson.loads(raw[: before.opened + 1] + rest)
    except orjson.JSONDecodeError:
        return None  # the whole body is parsed again, for the caller's error to be about what it sent
    new = native.get(field) if isinstance(native, dict) else None
    if not isinstance(new, list):
        return None
    ends = _scan(raw, cut, field, after_item=True)
    if ends is None or len(ends) != len(new):
        return None
    items = before.sent[:k] + new
    valid = before.valid[:k] + new
    seen = Seen(before.dialect, raw, before.opened, before.ends[:k] + ends, items, valid)
    return Parsed(native | {field: items}, native | {field: valid}, native, seen, k)


def _locate(raw: bytes, field: str, count: int) -> tuple[int, list[int]] | None:
    """Where `field`'s array opens in the top-level object and where each of its `count` items ends."""
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        return None
    pos = _skip(text, 0)
    if text[pos : pos + 1] != "{":
        return None
    pos = _skip(text, pos + 1)
    try:
        while text[pos : pos + 1] == '"':
            key, pos = _SCAN.raw_decode(text, pos)
            pos = _skip(text, pos)
            if text[pos : pos + 1] != ":":
                return None
            pos = _skip(text, pos + 1)
            if key == field:
                if text[pos : pos + 1] != "[":
                    return None
                opened = _bytes_at(text, pos)
                ends = _scan(raw, opened + 1, field, after_item=False)
                return (opened, ends) if ends is not None and len(ends) == count else None
            _, pos = _SCAN.raw_decode(text, pos)
            pos = _skip(text, pos)
            if text[pos : pos + 1] == ",":
                pos = _skip(text, pos + 1)
    except (ValueError, RecursionError):  # not JSON as expected, or nested past the scanner's reach
        return None
    return None


def _scan(raw: bytes, start: int, field: str, after_item: bool) -> list[int] | None:
    """From `start` (just past an item, or just past the array's `[`): where each following item of the
    array ends, in bytes. Then the rest of the top-level object is read to check it does not name
    `field` again (the last one would win, and it is not the one compared). None if it does not read."""
    try:
        text = raw[start:].decode()
    except UnicodeDecodeError:
        return None
    ascii_only = text.isascii()
    ends: list[int] = []  # in characters
    pos = _skip(text, 0)
    try:
        if not after_item and text[pos : pos + 1] != "]":
            _, pos = _SCAN.raw_decode(text, pos)
            ends.append(pos)
            pos = _skip(text, pos)
        while text[pos : pos + 1] == ",":
            _, pos = _SCAN.raw_decode(text, _skip(text, pos + 1))
            ends.append(pos)
            pos = _skip(text, pos)
        if text[pos : pos + 1] != "]":
            return None
        pos = _skip(text, pos + 1)
        while text[pos : pos + 1] == ",":  # the object's other keys
            key, pos = _SCAN.raw_decode(text, _skip(text, pos + 1))
            if key == field:
                return None
            pos = _skip(text, pos)
            if text[pos : pos + 1] != ":":
                return None
            _, pos = _SCAN.raw_decode(text, _skip(text, pos + 1))
            pos = _skip(text, pos)
    except (ValueError, RecursionError):  # not JSON as expected, or nested past the scanner's reach
        return None
    if text[pos : pos + 1] != "}":
        return None
    if ascii_only:
        return [start + end for end in ends]
    out, at, size = [], 0, start  # characters to bytes, each stretch of text encoded once
    for end in ends:
        size += len(text[at:end].encode())
        out.append(size)
        at = end
    return out


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _WS:
        pos += 1
    return pos


def _bytes_at(text: str, pos: int) -> int:
    return pos if text.isascii() else len(text[:pos].encode())
