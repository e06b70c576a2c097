"""What the proxy keeps per open session to make that session's next call cheap: one byte-bounded cache,
the least recently used dropped first.

Its parts: the session's last history as parsed and validated (`proxy/history.py`), its last answer's
prompt ids (`proxy/prompt_ids.py`), its sampled turns for engines that splice (`proxy/sessions.py`), and
the store's last record of it, which the next record refers to (`record_codec.Encoder`). Everything in it
can be rebuilt: a miss costs a call one full parse, or one record stored without references. So the
bound alone decides what open sessions cost in memory, and a closed session's parts are dropped at once.

Each value is charged the bytes its owner estimates it holds (`size`), on the high side: a long
history's text is held as its bytes, its strings and their JSON. A value larger than the whole bound is
not kept. Thread-safe: the store's writer thread encodes records too.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from collections import OrderedDict
from typing import Any

import orjson

# Enough for 256 open sessions of 200 agent turns (a 400 KB history: about 4 MB charged each).
DEFAULT_LIMIT = 1 << 30
_TRIM_AFTER = 64 << 20
_MALLOC_TRIM = getattr(ctypes.CDLL(ctypes.util.find_library("c")), "malloc_trim", None)  # glibc only


class SessionCache:
    def __init__(self, limit_bytes: int = DEFAULT_LIMIT):
        self.limit = limit_bytes
        self.bytes = 0  # charged now
        self.evicted = 0  # values dropped to stay under the bound, ever
        self._entries: OrderedDict[tuple[str, str], tuple[Any, int]] = OrderedDict()
        self._parts: set[str] = set()
        self._freed = 0
        self._lock = threading.Lock()

    def get(self, part: str, session_id: str) -> Any | None:
        key = (part, session_id)
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry[0]

    def put(self, part: str, session_id: str, value: Any, size: int) -> None:
        """Keep `value` (charged `size` bytes) as the session's `part`, replacing what was there."""
        key = (part, session_id)
        with self._lock:
            self._parts.add(part)
            old = self._entries.pop(key, None)
            if old is not None:
                self.bytes -= old[1]
                self._freed += old[1]
            if size <= self.limit:
                self._entries[key] = (value, size)
                self.bytes += size
            while self.bytes > self.limit:
                _, (evicted, dropped) = self._entries.popitem(last=False)
                del evicted  # freed here, not after the trim
                self.bytes -= dropped
                self.evicted += 1
                self._freed += dropped
            trim = self._trim_due()
        del old
        _trim(trim)

    def drop(self, part: str, session_id: str) -> None:
        with self._lock:
            old = self._entries.pop((part, session_id), None)
            if old is not None:
                self.bytes -= old[1]
                self._freed += old[1]
            trim = self._trim_due()
        del old
        _trim(trim)

    def _trim_due(self) -> bool:
        """Under the lock: whether another `_TRIM_AFTER` bytes went since the last trim (the count restarts).
        Read and reset in the same hold, so a count another thread adds is never lost to the reset."""
        if self._freed <= _TRIM_AFTER:
            return False
        self._freed = 0
        return True

    def forget(self, session_id: str) -> None:
        """The session is closed: every part of it goes."""
        with self._lock:
            parts = list(self._parts)
        for part in parts:
            self.drop(part, session_id)

    def __len__(self) -> int:
        return len(self._entries)


def _trim(due: bool) -> None:
    """Give what was dropped back to the system, once `_trim_due` says so (outside the lock: about 1 ms). A long
    history's pieces are hundreds of KB each, kept for different times: glibc's malloc serves them from its heap
    (its mmap threshold rises to the largest block freed) and keeps the holes they leave. Measured with 1 MB bodies
    in open sessions: RSS 1.75x the bound without, 1.4x with."""
    if due and _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def ids_bytes(n: int) -> int:
    """What `n` token ids held as Python ints cost: an int object and a list slot each."""
    return 36 * n


def kept_json(value: Any) -> bytes:
    """`orjson.dumps(value)`, for bytes kept long after: orjson's output keeps the buffer it was written in
    (4 KB for a 100-byte message, 8 KB for 2 KB), so a copy of its exact size is what is kept."""
    return bytes(memoryview(orjson.dumps(value)))
