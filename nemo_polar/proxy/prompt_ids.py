"""A session's prompt ids, read once: every answer of a token-returning server repeats the ids of the
whole prompt, and a session's next prompt starts with its last one.

An answer's body is parsed with its `prompt_token_ids` array cut out. The array's bytes are compared
with the session's last ones: when they begin with them, the ids read last time are taken as they
were (the same int objects: a 64k-token prompt is not turned into 64k new objects call after call)
and only the rest is parsed. The ids are then put back where the backend reads them, as `JoinedIds`:
the earlier ids and the rest, never copied into a list of every id (building and freeing a 100k-item
list was the largest cost of a long session's call). Any answer that does not read so (no such array,
an array that is not the one the backend reads, not JSON once cut) is parsed whole, as it would have
been.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from ..chat import JoinedIds
from ..session_cache import SessionCache, ids_bytes
from .backends.base import Backend

_NAME = "prompt_token_ids"
_KEY = b'"prompt_token_ids":['
_PART = "prompt_ids"  # in the session cache
_SMALL = 16384  # an answer this short is parsed whole: its ids are a few thousand at most


class PromptIds:
    def __init__(self, cache: SessionCache | None = None, small: int = _SMALL):
        # per session: the last answer's ids array (a view of its bytes), the ids read, and the earlier ids
        # they began with
        self._cache = cache if cache is not None else SessionCache()
        self._small = small

    def parse(self, session_id: str, backend: Backend, raw: bytes) -> Any:
        """`raw` (a whole answer) parsed; raises orjson's error when it is not JSON."""
        if len(raw) < self._small:
            return orjson.loads(raw)
        opened = raw.find(_KEY) + len(_KEY) - 1  # the array's `[`
        closed = raw.find(b"]", opened) if opened >= len(_KEY) - 1 else -1
        if closed < 0:
            return orjson.loads(raw)
        try:
            body = orjson.loads(raw[: opened + 1] + raw[closed:])
            head, tail = self._split(session_id, raw, opened + 1, closed)
        except orjson.JSONDecodeError:
            return orjson.loads(raw)
        choices = body.get("choices") if isinstance(body, dict) else None
        choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
        cut = [h for h in (body, choice, choice.get("message")) if isinstance(h, dict) and h.get(_NAME, ()) == []]
        if len(cut) != 1 or not isinstance(tail, list):
            return orjson.loads(raw)
        ids: Sequence[int] = JoinedIds(head, tail) if head else tail
        cut[0][_NAME] = ids
        if backend.prompt_ids(body, choice) is not ids:
            return orjson.loads(raw)  # the array cut out is not the one the backend reads
        kept = (memoryview(raw)[opened + 1 : closed], ids, head or None)
        self._cache.put(_PART, session_id, kept, len(raw) + ids_bytes(len(ids)))  # the view holds the whole answer
        return body

    def _split(self, session_id: str, raw: bytes, start: int, end: int) -> tuple[Sequence[int], Any]:
        """(the ids taken from the last answer, the rest parsed) of the ids array's text `raw[start:end]`,
        compared where it lies (hundreds of KB: never copied)."""
        last = self._cache.get(_PART, session_id)
        n = len(last[0]) if last is not None else 0
        ends = raw[start + n : start + n + 1] in (b",", b"]")  # the last answer's ids end where an id ends
        if last is not None and n and ends and raw.startswith(last[0], start):
            return last[1], orjson.loads(b"[" + raw[start + n + 1 : end] + b"]")
        return [], orjson.loads(b"[" + raw[start:end] + b"]")

    def extends(self, session_id: str, ids: Sequence[int]) -> Sequence[int] | None:
        """The earlier answer's ids that `ids` (the session's last answer's, as read) begin with: the two
        were read from the same bytes, so the store need not compare them."""
        last = self._cache.get(_PART, session_id)
        return last[2] if last is not None and last[1] is ids else None
