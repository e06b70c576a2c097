"""A session's budget of calls and sampled tokens, charged before a call is forwarded.

A harness that fires calls in parallel (sub-agents, side calls) must not get past its budget by having
them all in flight at once: each call takes its place before it goes upstream (one call, and the tokens
it may sample: its `max_tokens`, capped by what the session has left once the calls in flight hold
theirs), and gives back what it did not sample once it is recorded. So with a budget of N calls at most N
are ever sampled, and the tokens sampled never pass the token budget, however many calls arrive together.

Counts of what was recorded come from the store after a restart; what is in flight dies with the process.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from ..errors import BudgetSpent, Unauthorized
from ..records import Session
from ..store import SqliteStore
from .call import Call


@dataclass(slots=True)
class _Spent:
    calls: int  # recorded
    sampled: int  # tokens, recorded
    calls_held: int = 0  # in flight
    tokens_held: int = 0  # what the calls in flight may still sample


class Budgets:
    def __init__(self, store: SqliteStore):
        self.store = store
        self._spent: dict[str, _Spent] = {}
        self._given_back: dict[str, asyncio.Event] = {}  # set once a call in flight of the session is recorded
        self.spent_why: dict[str, str] = {}  # sessions refused for their budget, and why (the gateway stops them)

    async def take(self, session: Session, max_tokens: int | None) -> int | None:
        """A place for one more call of the session: the tokens it may sample (None: no token budget, so
        `max_tokens` stands). `BudgetSpent` once the calls recorded and in flight fill the call budget, or
        the tokens recorded the token budget; a call that finds every token left held by calls in flight
        waits until they give back what they did not sample."""
        if session.max_calls is None and session.max_sampled is None:
            return None
        while True:
            spent = self._of(session.id)
            why = _exhausted(session, spent)
            if why is not None:
                self.spent_why[session.id] = why
                raise BudgetSpent(why + "; stop here")
            if session.max_sampled is None:
                spent.calls_held += 1
                return None
            left = session.max_sampled - spent.sampled - spent.tokens_held
            if left > 0:
                tokens = min(max_tokens or left, left)
                spent.calls_held += 1
                spent.tokens_held += tokens
                return tokens
            await self._given_back.setdefault(session.id, asyncio.Event()).wait()
            if session.id not in self._spent:  # forgotten while it waited
                raise Unauthorized("the session was closed while this call waited for its budget")

    def settle(self, call: Call, sampled: int) -> None:
        """The call is over (recorded, or cancelled before it was): it counts with what it sampled and gives back
        what it held, once, whichever path ends it. Nothing for a call that took no place."""
        if not call.budgeted:
            return
        call.budgeted = False
        spent = self._of(call.session.id)
        spent.calls += 1
        spent.sampled += sampled
        spent.calls_held = max(0, spent.calls_held - 1)
        spent.tokens_held = max(0, spent.tokens_held - (call.held or 0))
        if (event := self._given_back.pop(call.session.id, None)) is not None:
            event.set()

    def forget(self, session_id: str) -> None:
        self._spent.pop(session_id, None)
        self.spent_why.pop(session_id, None)
        if (event := self._given_back.pop(session_id, None)) is not None:
            event.set()  # a call waiting wakes to find the session's key refused

    def _of(self, session_id: str) -> _Spent:
        spent = self._spent.get(session_id)
        if spent is None:  # after a restart: what the store holds of the session
            records = self.store.records(session_id)
            spent = self._spent[session_id] = _Spent(len(records), sum(len(r.completion_token_ids) for r in records))
        return spent


def _exhausted(session: Session, spent: _Spent) -> str | None:
    if session.max_calls is not None and spent.calls + spent.calls_held >= session.max_calls:
        flying = f", {spent.calls_held} of them in flight" if spent.calls_held else ""
        calls = spent.calls + spent.calls_held
        return f"session budget spent: {calls} model calls{flying} (its budget: {session.max_calls})"
    if session.max_sampled is not None and spent.sampled >= session.max_sampled:
        return f"session budget spent: {spent.sampled} sampled tokens (its budget: {session.max_sampled})"
    return None
