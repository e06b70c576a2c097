"""Pause and drain generation for a weight update: new calls wait, running calls finish.

A call that passes the gate gets a `Hold`, its place among the calls in flight. The hold goes to
whoever finishes the call (the whole-answer path, or the stream's relay) and that one releases it,
once, whatever happened: an answer, an error, a cancellation, a harness that went away.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ..errors import Paused


def _untracked(delta: int) -> None:
    pass


class Hold:
    """One call's place at the gate; `with hold:` releases it on leaving the block."""

    __slots__ = ("_gate",)

    def __init__(self, gate: GenerationGate):
        self._gate: GenerationGate | None = gate

    def release(self) -> None:
        """The first release counts; any later one does nothing."""
        gate, self._gate = self._gate, None
        if gate is not None:
            gate._leave()

    def __enter__(self) -> Hold:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class GenerationGate:
    def __init__(self, wait_s: float = 600.0, track: Callable[[int], None] = _untracked):
        self.wait_s = wait_s
        self.inflight = 0
        self.track = track  # told +1 and -1 as calls enter and leave (the upstream in-flight gauge)
        self._open = asyncio.Event()
        self._open.set()
        self._drained = asyncio.Event()
        self._drained.set()
        self.listeners: list[Callable[[bool], None]] = []  # told paused=True/False (a node's pipeline)

    @property
    def paused(self) -> bool:
        return not self._open.is_set()

    def enter(self) -> Hold | None:
        """A hold at once while the gate is open (a call's path awaits nothing here); None while
        paused: then `await wait()`."""
        return self._hold() if self._open.is_set() else None

    async def wait(self) -> Hold:
        """A hold once the gate opens again; `Paused` after `wait_s`."""
        try:
            await asyncio.wait_for(self._open.wait(), self.wait_s)
        except TimeoutError:
            raise Paused(f"generation paused for more than {self.wait_s:.0f}s") from None
        return self._hold()

    def _hold(self) -> Hold:
        self.inflight += 1
        self._drained.clear()
        self.track(+1)
        return Hold(self)

    def _leave(self) -> None:
        self.inflight -= 1
        if self.inflight == 0:
            self._drained.set()
        self.track(-1)

    async def pause(self, timeout_s: float) -> bool:
        """Stop admitting calls and wait until none runs; False if they did not drain in time."""
        self._open.clear()
        for listener in self.listeners:
            listener(True)
        try:
            await asyncio.wait_for(self._drained.wait(), timeout_s)
            return True
        except TimeoutError:
            return False

    def resume(self) -> None:
        self._open.set()
        for listener in self.listeners:
            listener(False)

    def status(self) -> dict[str, object]:
        return {"paused": self.paused, "inflight": self.inflight}
