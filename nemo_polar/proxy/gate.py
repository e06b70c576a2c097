"""Pause and drain generation for a weight update: new calls wait, running calls finish."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from ..errors import Paused


class GenerationGate:
    def __init__(self, wait_s: float = 600.0):
        self.wait_s = wait_s
        self.inflight = 0
        self._open = asyncio.Event()
        self._open.set()
        self._drained = asyncio.Event()
        self._drained.set()
        self.listeners: list[Callable[[bool], None]] = []  # told paused=True/False (a node's pipeline)

    @property
    def paused(self) -> bool:
        return not self._open.is_set()

    async def acquire(self) -> None:
        if not self._open.is_set():
            try:
                await asyncio.wait_for(self._open.wait(), self.wait_s)
            except TimeoutError:
                raise Paused(f"generation paused for more than {self.wait_s:.0f}s") from None
        self.inflight += 1
        self._drained.clear()

    def release(self) -> None:
        self.inflight -= 1
        if self.inflight == 0:
            self._drained.set()

    @asynccontextmanager
    async def generation(self) -> AsyncIterator[None]:
        await self.acquire()
        try:
            yield
        finally:
            self.release()

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
