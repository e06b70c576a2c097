"""A session's states, in the order it moves through them; the last four are terminal and final:

    registered -> initializing -> ready -> running -> post_run -> building -> evaluating
               -> completed | error | timeout | cancelled

Below the contracts: an evaluator reads how its session ended without importing them.
"""

from __future__ import annotations

from enum import StrEnum


class SessionState(StrEnum):
    REGISTERED = "registered"
    INITIALIZING = "initializing"
    READY = "ready"
    RUNNING = "running"
    POST_RUN = "post_run"
    BUILDING = "building"
    EVALUATING = "evaluating"
    COMPLETED = "completed"
    ERROR = "error"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset({SessionState.COMPLETED, SessionState.ERROR, SessionState.TIMEOUT, SessionState.CANCELLED})
