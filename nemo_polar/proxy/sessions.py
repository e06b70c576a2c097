"""Sessions as the proxy sees them: a key, an arrival counter, its budget (`budget.py`), and in the session
cache the turns it sampled, its last history and prompt ids.

Kept in memory for the response path and backed by the store, so a restarted proxy recognises
every key it handed out and continues each session's numbering and splicing where it stopped. Keys
live in memory and in the store only as hashes; a closed session's key is refused from then on
(after a restart too), while its records stay readable.
"""

from __future__ import annotations

import secrets
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..chat import Completion, ToolCall, Usage
from ..records import Session
from ..store import SqliteStore, key_hash
from .budget import Budgets
from .history import Histories
from .prompt_ids import PromptIds
from .splice import SpliceIndex

if TYPE_CHECKING:
    from .call import Call

_SPLICES = "splices"  # in the session cache


def new_key() -> str:
    return "sk-polar-" + secrets.token_urlsafe(24)  # 32 characters: store.KEY_PATTERN redacts them


@dataclass
class Tally:
    """What an open session's calls came to at the proxy, counted as they happen: every call that reached it
    with the session's key, those refused before they were forwarded (nothing recorded: bad input, a spent
    budget), and the proxy's own time on each answered call, from its request's arrival to its answer's last
    byte with the upstream's time left out (`polar runtime check --fidelity`)."""

    arrived: int = 0
    refused: int = 0
    timed: int = 0
    added_s: float = 0.0
    added_max_s: float = 0.0

    def took(self, call: Call) -> None:
        """An answered call's time in the proxy (`Call.proxy_s`)."""
        seconds = call.proxy_s()
        if seconds is None:
            return
        self.timed += 1
        self.added_s += seconds
        self.added_max_s = max(self.added_max_s, seconds)


class Sessions:
    def __init__(self, store: SqliteStore):
        self.store = store
        self._by_hash: dict[str, Session] = {}  # filled as keys are used (the store has only hashes)
        self._seq: dict[str, int] = {}
        self._tallies: dict[str, Tally] = {}
        self.budgets = Budgets(store)
        # what makes a session's next call cheap, bounded by bytes (the store's last record of it is there too)
        self.cache = store.cache
        self.history = Histories(self.cache)  # each session's last history as validated (a restart revalidates)
        self.prompt_ids = PromptIds(self.cache)  # and its last answer's prompt ids

    def open(self, session_id: str | None = None, metadata: dict[str, Any] | None = None, **route: Any) -> Session:
        """A new session; `route` holds its own `upstream_url`, `upstream_model` and `max_tokens`."""
        session = Session(
            id=session_id or uuid.uuid4().hex,
            api_key=new_key(),
            created_at=time.time(),
            metadata=metadata or {},
            **route,
        )
        self.store.add_session(session)
        self._by_hash[key_hash(session.api_key)] = session
        return session

    def by_key(self, api_key: str) -> Session | None:
        hashed = key_hash(api_key)
        session = self._by_hash.get(hashed)
        if session is None and api_key.startswith("sk-polar-"):
            # opened before a restart, or by another process sharing the store
            session = self.store.session_by_key(api_key)
            if session is not None:
                self._by_hash[hashed] = session
        return session

    def close(self, session_id: str) -> None:
        """The session is final: its key is refused from now on; its records stay in the store."""
        self.store.close_session(session_id)
        for hashed in [h for h, s in self._by_hash.items() if s.id == session_id]:
            del self._by_hash[hashed]
        self._seq.pop(session_id, None)
        self._tallies.pop(session_id, None)
        self.budgets.forget(session_id)
        self.cache.forget(session_id)

    def tally(self, session_id: str) -> Tally:
        """The session's counts since this proxy started (kept while it is open)."""
        tally = self._tallies.get(session_id)
        if tally is None:
            tally = self._tallies[session_id] = Tally()
        return tally

    def took(self, call: Call) -> None:
        """An answered call's time in the proxy, on its session's tally (none once the session has closed)."""
        tally = self._tallies.get(call.session.id)
        if tally is not None:
            tally.took(call)

    def next_seq(self, session_id: str) -> int:
        seq = self._seq.get(session_id)
        if seq is None:
            seq = self.store.max_seq(session_id) + 1
        self._seq[session_id] = seq + 1
        return seq

    def splices(self, session_id: str) -> SpliceIndex:
        """The session's sampled turns (read back from the store when the cache has none)."""
        index = self.cache.get(_SPLICES, session_id)
        if index is None:
            index = SpliceIndex()
            for r in self.store.records(session_id):
                if r.trainable and r.message is not None:
                    index.add(
                        _completion(r.message, r.prompt_token_ids, r.completion_token_ids, r.completion_logprobs)
                    )
            self.cache.put(_SPLICES, session_id, index, index.size)
        return index

    def sampled(self, session_id: str, completion: Completion) -> None:
        """A turn the session sampled, for engines that splice it back."""
        index = self.splices(session_id)
        index.add(completion)
        self.cache.put(_SPLICES, session_id, index, index.size)


def _completion(message: dict[str, Any], prompt: list[int], ids: list[int], logprobs: list[float]) -> Completion:
    calls = [ToolCall(t["id"], t["name"], t["arguments"]) for t in message.get("tool_calls") or []]
    return Completion(
        text=message.get("content") or "",
        tool_calls=calls,
        prompt_token_ids=prompt,
        completion_token_ids=ids,
        completion_logprobs=logprobs,
        usage=Usage(),
    )
