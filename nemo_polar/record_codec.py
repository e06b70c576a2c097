"""How a record is stored: what its call added to its session, the rest by reference.

A harness re-sends its whole history on every call, so records stored whole grow with the square of a
session's length (a 200-call session kept its history 200 times). A stored record keeps instead:
- of each body (the harness's and the upstream's), every top-level list (messages, input, contents,
  tools) as the run of items it shares with the same list of the session's previous record (by
  reference: that record's id and a count) plus the hashes of its new items; each item is stored once
  per session in `parts`, by its content hash, and so is any other large value (Codex's instructions);
- its prompt ids as the longest prefix it shares with a recent call's prompt + sample (by reference:
  that call's id and a count) plus the new tail, and its sampled ids and logprobs, all as packed arrays
  (int32 or int64, float64);
- the rest (times, status, the answer) as JSON; JSON and arrays compressed where that pays.
A short call's record (a prompt under `SHORT_PROMPT` ids) is stored whole, as before (its `tokens` NULL,
like a row from before records by reference): references would cost it more than they save.

Readers get whole `CompletionRecord`s, equal to the ones written: a session is decoded in the order its
rows were written, so a reference always points back at a record already decoded. Items are compared by
their JSON bytes, or as the very objects the last record held, never by Python equality (`1 == True`,
and key order), so what is read is what was written. A reference only ever names a record already
committed (`Encoder.committed`) or one of the same transaction, so a crash never leaves one pointing at
nothing. Keys (`sk-polar-...`) are redacted before anything is hashed or stored.
"""

from __future__ import annotations

import hashlib
import re
import struct
import threading
import zlib
from array import array
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from .chat import as_list
from .errors import PolarError
from .records import CompletionRecord
from .session_cache import SessionCache, ids_bytes, kept_json

# Every key the proxy mints (proxy/sessions.new_key): redacted from stored bytes wherever it appears
KEY_PATTERN = re.compile(rb"sk-polar-[A-Za-z0-9_-]{32}")
REDACTED = b"[redacted]"

BODIES = ("native_request", "upstream_request")
TOKENS = ("prompt_token_ids", "completion_token_ids", "completion_logprobs")
_PART_MIN_BYTES = 256  # a non-list value this long is a part: the same instructions every call
_COMPRESS_MIN_BYTES = 512  # below this, zlib's header and a call's time cost more than it saves
SHORT_PROMPT = 512  # ids: a call this short is stored whole
_RECENT = 4  # earlier calls a prompt is compared with: the chain's last, and a sub-agent's or a retry's
_PART = "records"  # in the session cache: what a session's last records left for its next one to refer to
_HEADER = struct.Struct("<BIII")  # flags, tail, sampled ids, logprobs
_ZLIB, _WIDE = 1, 2  # flags: the arrays are compressed; ids are int64 (one did not fit int32)


class StoredRecordError(PolarError):
    """A stored record that cannot be read back: a reference to a record or part the store lacks."""


@dataclass(frozen=True)
class Encoded:
    """One record as rows: its own and the parts it adds; `memory` is what the next record may refer to."""

    record: CompletionRecord
    row: tuple  # (id, session_id, seq, status, data, tokens)
    parts: list[tuple[str, bytes, bytes]]  # (session_id, hash, data)
    memory: _Memory | None


@dataclass(frozen=True)
class Bodies:
    """A record's bodies as stored: entries that refer to the session's earlier records, and new parts."""

    record_id: str
    sources: tuple[Any, Any]  # the native and upstream bodies they were made from
    entries: dict[str, list | None]
    parts: list[tuple[str, bytes, bytes]]
    lists: dict[tuple[str, str], _List]
    # an earlier record's prompt ids that this record's prompt is known to begin with (they were read from
    # the same bytes of the answer): a 100k-id prefix taken on trust instead of compared again
    prompt_base: Sequence[int] | None = None


@dataclass
class _Memory:
    """What a session's record left for the next one: its lists' items (JSON) and their hashes, and its ids."""

    record_id: str
    lists: dict[tuple[str, str], _List]
    prompt: Sequence[int]
    sampled: list[int]
    parts: list[bytes]  # hashes it stored


@dataclass
class _Session:
    last: _Memory | None = None
    recent: deque[_Memory] = field(default_factory=lambda: deque(maxlen=_RECENT))  # their ids only
    parts: set[bytes] = field(default_factory=set)

    def size(self) -> int:
        """The bytes it holds, for the session cache: the last record's lists as JSON, its prompt's ids
        (the recent ones are mostly the same ids: `chat.JoinedIds`), and a set slot per part's hash."""
        last = self.last
        held = 80 * len(self.parts)
        if last is not None:
            held += sum(len(v.joined) + 8 * len(v.lengths) for v in last.lists.values()) + ids_bytes(len(last.prompt))
        return held + sum(ids_bytes(len(m.sampled)) for m in self.recent)


class Encoder:
    """Encodes records against what their session's committed records hold, and the records before them
    in the same transaction (`along`). Thread-safe: the event loop and the store's writer thread both
    encode; `committed` is called once an encoding is in the store."""

    def __init__(self, cache: SessionCache | None = None):
        self._cache = cache if cache is not None else SessionCache()
        self._lock = threading.Lock()

    def bodies(
        self, session_id: str, record_id: str, native: Any, upstream: Any, after: _Memory | None = None
    ) -> Bodies:
        """A record's two bodies as stored, encoded ahead of the rest: the proxy does it while the upstream
        is generating, so a long history costs its call no time there. `encode` takes it for the record
        whose `native_request` and `upstream_request` are these very objects. `after`: a record of the
        same transaction to refer to rather than the last committed one."""
        with self._lock:
            state = self._cache.get(_PART, session_id)
            last, known = (state.last, state.parts) if state is not None else (None, set())
        last = after or last
        lists: dict[tuple[str, str], _List] = {}
        parts: list[tuple[str, bytes, bytes]] = []

        def part(raw: bytes) -> bytes:
            clean = KEY_PATTERN.sub(REDACTED, raw)
            digest = hashlib.blake2b(clean, digest_size=16).digest()
            if digest not in known:
                parts.append((session_id, digest, _squeeze(clean)))
            return digest

        entries = {
            name: None if body is None else _body(name, body, last, lists, part)
            for name, body in zip(BODIES, (native, upstream), strict=True)
        }
        return Bodies(record_id, (native, upstream), entries, parts, lists)

    def encode(self, record: CompletionRecord, bodies: Bodies | None = None, along: Sequence[Encoded] = ()) -> Encoded:
        """`along`: the records encoded before this one for the same transaction, which it may refer to.
        A short call's record (a prompt under `SHORT_PROMPT` ids, and no prepared bodies) is stored whole,
        as records were before: references would cost it more than they save, and nothing refers to it."""
        if bodies is None and len(record.prompt_token_ids) < SHORT_PROMPT:
            if not isinstance(record.prompt_token_ids, list):  # the proxy's `JoinedIds`, serialised as a list
                record = record.model_copy(update={"prompt_token_ids": as_list(record.prompt_token_ids)})
            data = KEY_PATTERN.sub(REDACTED, record.__pydantic_serializer__.to_json(record))
            return Encoded(record, (record.id, record.session_id, record.seq, record.status, data, None), [], None)
        mine = [e.memory for e in along if e.memory is not None and e.record.session_id == record.session_id]
        native, upstream = record.native_request, record.upstream_request
        made_for = bodies.sources if bodies is not None else (None, None)
        if bodies is None or bodies.record_id != record.id or made_for[0] is not native or made_for[1] is not upstream:
            bodies = self.bodies(record.session_id, record.id, native, upstream, mine[-1] if mine else None)
        with self._lock:
            state = self._cache.get(_PART, record.session_id)
            recent = (list(state.recent) if state is not None else []) + mine[-_RECENT:]
        doc = record.__pydantic_serializer__.to_python(record, mode="json", exclude=set(BODIES) | set(TOKENS))
        doc.update(bodies.entries)
        prompt, sampled = record.prompt_token_ids, record.completion_token_ids
        base, keep = _prefix(prompt, recent, bodies.prompt_base)
        doc["prompt"] = [base, keep] if keep else None
        data = _squeeze(KEY_PATTERN.sub(REDACTED, orjson.dumps(doc)))
        tokens = _pack(prompt[keep:], sampled, record.completion_logprobs)
        row = (record.id, record.session_id, record.seq, record.status, data, tokens)
        memory = _Memory(record.id, bodies.lists, prompt, sampled, [p[1] for p in bodies.parts])
        return Encoded(record, row, bodies.parts, memory)

    def stored(self, session_id: str, digests: list[bytes]) -> None:
        """These parts of the session are in the store (committed ahead of their record)."""
        with self._lock:
            state = self._session(session_id)
            state.parts.update(digests)
            self._cache.put(_PART, session_id, state, state.size())

    def _session(self, session_id: str) -> _Session:
        state = self._cache.get(_PART, session_id)
        return _Session() if state is None else state

    def committed(self, encoded: Encoded) -> None:
        """`encoded` is in the store: later records of its session may refer to it."""
        memory = encoded.memory
        if memory is None:
            return
        with self._lock:
            state = self._session(encoded.record.session_id)
            state.last = memory
            state.recent.append(replace(memory, lists={}))  # only the last one's lists are compared with
            state.parts.update(memory.parts)
            self._cache.put(_PART, encoded.record.session_id, state, state.size())

    def forget(self, session_id: str) -> None:
        """The session is closed: nothing will refer to its records again."""
        self._cache.drop(_PART, session_id)


def _body(name: str, body: Mapping[str, Any], last: _Memory | None, lists: dict, part: Callable) -> list:
    """A body as [key, kind, ...] entries in its key order: `v` a value kept inline, `p` a part's hash,
    `l` a list: the record it shares a prefix with, how many items, and the hashes of the rest."""
    entries: list = []
    for key, value in body.items():
        if isinstance(value, list):
            before = last.lists.get((name, key)) if last is not None else None
            joined, lengths, keep = _items(value, before)
            hashes = (before.hashes[:keep] if before is not None else []) + [
                part(joined[start : start + n]) for start, n in _spans(lengths, keep)
            ]
            lists[(name, key)] = _List(value, joined, lengths, hashes)
            base = last.record_id if keep and last is not None else None
            entries.append([key, "l", base, keep, [h.hex() for h in hashes[keep:]]])
            continue
        if value is None or isinstance(value, (bool, int, float)) or (isinstance(value, str) and len(value) < 64):
            entries.append([key, "v", value])  # too small to be a part, known without serialising it
            continue
        raw = orjson.dumps(value)
        if len(raw) >= _PART_MIN_BYTES:
            entries.append([key, "p", part(raw).hex()])
        else:
            entries.append([key, "v", value])
    return entries


@dataclass(frozen=True)
class _List:
    """A list as stored: its items, their JSON joined (`[` + each item's JSON, comma-separated, + `]`),
    each item's length, and their hashes."""

    objects: list[Any]
    joined: bytes
    lengths: list[int]
    hashes: list[bytes]

    def items(self) -> list[bytes]:
        return [self.joined[start : start + n] for start, n in _spans(self.lengths, 0)]


def _items(value: list, before: _List | None) -> tuple[bytes, list[int], int]:
    """The list's JSON, its items' lengths, and how many leading items are byte for byte the ones
    `before` had. The same objects are the same bytes: the proxy hands a history's unchanged items
    on as the very objects it parsed last call, so only the new ones are serialised. Else one
    comparison of the whole list's JSON says whether it starts with all of `before`, and failing
    that, items are compared one by one."""
    if before is None or not before.lengths:
        items = [orjson.dumps(v) for v in value]
        return b"[" + b",".join(items) + b"]", [len(i) for i in items], 0
    same, limit = 0, min(len(value), len(before.objects))
    while same < limit and value[same] is before.objects[same]:
        same += 1
    if same:
        new = [orjson.dumps(v) for v in value[same:]]
        end = 1 + sum(before.lengths[:same]) + same - 1  # past the last item kept
        joined = before.joined[:end] + b"".join(b"," + item for item in new) + b"]"
        return joined, before.lengths[:same] + [len(i) for i in new], same
    joined = kept_json(value)
    end = len(before.joined) - 1  # where `before`'s closing bracket was
    if joined.startswith(memoryview(before.joined)[:end]) and joined[end : end + 1] in (b",", b"]"):
        keep = len(before.lengths)
        return joined, before.lengths + [len(orjson.dumps(v)) for v in value[keep:]], keep
    items = [orjson.dumps(v) for v in value]
    return joined, [len(i) for i in items], common_prefix(items, before.items())


def _spans(lengths: list[int], start: int) -> list[tuple[int, int]]:
    """(offset in the list's JSON, length) of each item from `start` on."""
    offset = 1 + sum(lengths[:start]) + start  # the bracket, the items before, their commas
    spans = []
    for n in lengths[start:]:
        spans.append((offset, n))
        offset += n + 1
    return spans


def _prefix(
    prompt: Sequence[int], recent: list[_Memory], known: Sequence[int] | None = None
) -> tuple[str | None, int]:
    """The recent call whose prompt + sample this prompt shares the longest prefix with, and its length.
    The last call first: a chain's next prompt extends it whole, and then nothing else is compared.
    `known`: a prompt this one is known to begin with (the very list object), not compared again."""
    best: tuple[str | None, int] = (None, 0)
    for memory in reversed(recent):
        p, s = memory.prompt, memory.sampled
        n = len(p) + len(s)
        starts = p is known or (len(p) <= len(prompt) and prompt[: len(p)] == p)
        if not starts:
            n = common_prefix(prompt, p)
        elif n > len(prompt) or prompt[len(p) : n] != s:
            n = len(p) + common_prefix(prompt[len(p) :], s)
        if n > best[1]:
            best = (memory.record_id, n)
        if n and (n == len(p) + len(s) or n == len(prompt)):  # nothing else can share more
            break
    return best


def common_prefix(a: list, b: list) -> int:
    """How many leading items two lists share (token ids, or items' JSON), found by halving: every
    comparison is one C-speed slice compare, never a step per item. The trace builder's drift
    analysis uses it too."""
    lo, hi = 0, min(len(a), len(b))  # a[:lo] == b[:lo]; the first difference is before hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _pack(tail: list[int], sampled: list[int], logprobs: list[float]) -> bytes:
    flags = 0
    try:
        ids = array("i", tail).tobytes() + array("i", sampled).tobytes()
    except OverflowError:
        flags |= _WIDE
        ids = array("q", tail).tobytes() + array("q", sampled).tobytes()
    body = ids + array("d", logprobs).tobytes()
    if len(body) >= _COMPRESS_MIN_BYTES:
        squeezed = zlib.compress(body, 1)
        if len(squeezed) < len(body) * 0.9:
            flags, body = flags | _ZLIB, squeezed
    return _HEADER.pack(flags, len(tail), len(sampled), len(logprobs)) + body


def _unpack(blob: bytes) -> tuple[list[int], list[int], list[float]]:
    flags, tail, sampled, logprobs = _HEADER.unpack_from(blob)
    body = blob[_HEADER.size :]
    if flags & _ZLIB:
        body = zlib.decompress(body)
    kind, width = ("q", 8) if flags & _WIDE else ("i", 4)
    ids = array(kind)
    ids.frombytes(body[: (tail + sampled) * width])
    lps = array("d")
    lps.frombytes(body[(tail + sampled) * width :])
    all_ids = ids.tolist()
    return all_ids[:tail], all_ids[tail:], lps.tolist()


def lengths(doc_keep: int, blob: bytes) -> tuple[int, int]:
    """(prompt tokens, sampled tokens) of a stored record, from its row alone."""
    _, tail, sampled, _ = _HEADER.unpack_from(blob)
    return doc_keep + tail, sampled


def _squeeze(raw: bytes) -> bytes:
    """zlib where it saves a tenth; a zlib stream starts with 0x78, JSON never does, so readers can tell."""
    if len(raw) >= _COMPRESS_MIN_BYTES:
        squeezed = zlib.compress(raw, 1)
        if len(squeezed) < len(raw) * 0.9:
            return squeezed
    return raw


def unsqueeze(data: bytes) -> bytes:
    return zlib.decompress(data) if data[:1] == b"x" else data


class Decoder:
    """A session's stored rows back into records, in the order they were written."""

    def __init__(self, parts: Mapping[bytes, bytes]):
        self._raw = parts
        self._parts: dict[bytes, Any] = {}  # decoded once: records of a session share their items
        self._lists: dict[str, dict[tuple[str, str], list[Any]]] = {}  # each record's lists, for later ones
        self._seen: dict[str, tuple[list[int], list[int]]] = {}  # each record's prompt and sample

    def record(self, data: bytes, tokens: bytes | None) -> CompletionRecord:
        doc = orjson.loads(unsqueeze(data))
        if tokens is None:  # a row from before records by reference: the record whole
            return CompletionRecord.model_validate(doc)
        rid = doc["id"]
        lists: dict[tuple[str, str], list[Any]] = {}
        for name in BODIES:
            if doc[name] is not None:
                doc[name] = self._body(name, doc[name], lists, rid)
        tail, sampled, logprobs = _unpack(tokens)
        ref = doc.pop("prompt")
        prompt = tail if ref is None else self._prefix(ref[0], ref[1], rid) + tail
        self._lists[rid] = lists
        self._seen[rid] = (prompt, sampled)
        # the arrays are ints and floats by construction: validated, a long session's ids cost seconds
        arrays = {"prompt_token_ids": prompt, "completion_token_ids": sampled, "completion_logprobs": logprobs}
        return CompletionRecord.model_validate(doc).model_copy(update=arrays)

    def _prefix(self, base: str, keep: int, rid: str) -> list[int]:
        prompt, sampled = self._earlier(self._seen, base, rid)
        return prompt[:keep] if keep <= len(prompt) else prompt + sampled[: keep - len(prompt)]

    def _body(self, name: str, entries: list, lists: dict, rid: str) -> dict[str, Any]:
        body: dict[str, Any] = {}
        for entry in entries:
            key, kind = entry[0], entry[1]
            if kind == "v":
                body[key] = entry[2]
            elif kind == "p":
                body[key] = self._part(bytes.fromhex(entry[2]), rid)
            else:
                _, _, base, keep, tail = entry
                head = self._earlier(self._lists, base, rid).get((name, key), ()) if keep else ()
                if len(head) < keep:
                    raise StoredRecordError(f"record {rid} refers to {keep} items of {name}.{key} that {base} lacks")
                items = list(head[:keep]) + [self._part(bytes.fromhex(h), rid) for h in tail]
                lists[(name, key)] = items
                body[key] = list(items)  # the record's own list: a reader's change cannot reach later records
        return body

    def _part(self, digest: bytes, rid: str) -> Any:
        value = self._parts.get(digest, self)
        if value is self:
            raw = self._raw.get(digest)
            if raw is None:
                raise StoredRecordError(f"record {rid} refers to a stored part {digest.hex()} the store lacks")
            value = self._parts[digest] = orjson.loads(unsqueeze(raw))
        return value

    @staticmethod
    def _earlier(table: dict[str, Any], base: str, rid: str) -> Any:
        try:
            return table[base]
        except KeyError:
            raise StoredRecordError(f"record {rid} refers to record {base}, which its session does not hold") from None
