"""Sessions as the proxy sees them: a key, an arrival counter, and in the session cache the turns it
sampled, its last history and prompt ids.

Kept in memory for the response path and backed by the store, so a restarted proxy recognises
every key it handed out and continues each session's numbering and splicing where it stopped. Keys
live in memory and in the store only as hashes; a closed session's key is refused from then on
(after a restart too), while its records stay readable.
"""

from __future__ import annotations

import secrets
import time
import uuid
from typing import Any

from ..chat import Completion, ToolCall, Usage
from ..errors import BudgetSpent
from ..records import Session
from ..store import SqliteStore, key_hash
from .history import Histories
from .prompt_ids import PromptIds
from .splice import SpliceIndex

_SPLICES = "splices"  # in the session cache


def new_key() -> str:
    return "sk-polar-" + secrets.token_urlsafe(24)  # 32 characters: store.KEY_PATTERN redacts them


class Sessions:
    def __init__(self, store: SqliteStore):
        self.store = store
        self._by_hash: dict[str, Session] = {}  # filled as keys are used (the store has only hashes)
        self._seq: dict[str, int] = {}
        self._spent: dict[str, list[int]] = {}  # per session: calls recorded, tokens sampled (a budget's count)
        self.spent_why: dict[str, str] = {}  # sessions refused for their budget, and why (the gateway stops them)
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
        self._spent.pop(session_id, None)
        self.spent_why.pop(session_id, None)
        self.cache.forget(session_id)

    def next_seq(self, session_id: str) -> int:
        seq = self._seq.get(session_id)
        if seq is None:
            seq = self.store.max_seq(session_id) + 1
        self._seq[session_id] = seq + 1
        return seq

    def budget_left(self, session: Session) -> int | None:
        """The sampled tokens the session may still ask for (None: no token budget); `BudgetSpent` once its
        calls or tokens are spent (and the reason kept for the gateway)."""
        if session.max_calls is None and session.max_sampled is None:
            return None
        calls, sampled = self._counts(session.id)
        why = None
        if session.max_calls is not None and calls >= session.max_calls:
            why = f"session budget spent: {calls} model calls (its budget: {session.max_calls})"
        elif session.max_sampled is not None and sampled >= session.max_sampled:
            why = f"session budget spent: {sampled} sampled tokens (its budget: {session.max_sampled})"
        if why is not None:
            self.spent_why[session.id] = why
            raise BudgetSpent(why + "; stop here")
        return None if session.max_sampled is None else session.max_sampled - sampled

    def charge(self, session_id: str, sampled: int) -> None:
        """One more call of the session recorded, with what it sampled."""
        counts = self._counts(session_id)
        counts[0] += 1
        counts[1] += sampled

    def _counts(self, session_id: str) -> list[int]:
        counts = self._spent.get(session_id)
        if counts is None:  # after a restart: what the store holds of the session
            records = self.store.records(session_id)
            counts = self._spent[session_id] = [len(records), sum(len(r.completion_token_ids) for r in records)]
        return counts

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
