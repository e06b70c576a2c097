"""A session's history, checked once: a harness re-sends every earlier message on each call, and only
what changed since its last call is checked and validated again.

A dialect names the body field that holds its history and the wire model of one item
(`Dialect.history`, e.g. `("messages", ChatMessage)`). Per session the proxy keeps the previous call's
items as the harness sent them (parsed JSON) and as the wire model validated them. An item equal to
the one at its place last time is handed to the dialect's parser already validated (pydantic takes a
model instance as it is) and is not walked for its depth again; the rest are checked as before. A new
item the wire model refuses stays as sent, so the dialect's own validation reports it in its words.

Equal means Python's equality of parsed JSON (`1 == 1.0`, key order aside): what the dialect parses is
the same, and the record keeps the body exactly as sent (record_codec.py compares bytes).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter, ValidationError

from .dialects import Dialect

_SESSIONS = 256  # sessions whose last history is kept (the least recent dropped: it costs a revalidation)


@dataclass(frozen=True)
class Seen:
    """One call's history: the items as sent, and as validated (an item that failed stays as sent)."""

    dialect: str
    sent: list[Any]
    valid: list[Any]


class Histories:
    def __init__(self, sessions: int = _SESSIONS):
        self._seen: OrderedDict[str, Seen] = OrderedDict()
        self._limit = sessions
        self._adapters: dict[str, TypeAdapter] = {}

    def reuse(self, session_id: str, dialect: Dialect, body: Any) -> tuple[Any, Seen | None]:
        """`body` with every history item equal to last call's replaced by its validated form (a shallow
        copy; `body` itself is untouched), and what to `keep` once the call parsed."""
        if dialect.history is None or not isinstance(body, dict):
            return body, None
        field, _ = dialect.history
        items = body.get(field)
        if not isinstance(items, list):
            return body, None
        before = self._seen.get(session_id)
        same = before is not None and before.dialect == dialect.name
        sent, valid = (before.sent, before.valid) if same else ((), ())
        n = min(len(items), len(sent))
        out = [valid[i] if items[i] == sent[i] else items[i] for i in range(n)] + items[n:]
        return body | {field: out}, Seen(dialect.name, items, out)

    def validate(self, dialect: Dialect, body: dict[str, Any], seen: Seen) -> None:
        """Validate, in place, the items of `body`'s history that are still as sent (the new ones)."""
        assert dialect.history is not None
        field, item = dialect.history
        adapter = self._adapters.get(dialect.name)
        if adapter is None:
            adapter = self._adapters[dialect.name] = TypeAdapter(item)
        out = body[field]
        for i, value in enumerate(out):
            if value is seen.sent[i]:
                try:
                    out[i] = adapter.validate_python(value)
                except ValidationError:
                    pass  # left as sent: the dialect's validation of the whole body says what is wrong

    def keep(self, session_id: str, seen: Seen) -> None:
        """The call parsed: its history is what the session's next call is compared with."""
        self._seen[session_id] = seen
        self._seen.move_to_end(session_id)
        while len(self._seen) > self._limit:
            self._seen.popitem(last=False)

    def forget(self, session_id: str) -> None:
        self._seen.pop(session_id, None)
