"""State-change events for `GET /events`: fanned out to SSE subscribers, published from any thread."""

from __future__ import annotations

import asyncio
import threading
from contextlib import suppress
from typing import Any


class Broadcaster:
    """Each subscriber has a bounded queue on its own loop; one that does not read loses events, not the server."""

    def __init__(self) -> None:
        self._subs: list[tuple[asyncio.AbstractEventLoop, asyncio.Queue[dict[str, Any]]]] = []
        self._lock = threading.Lock()

    def subscribe(self) -> asyncio.Queue[dict[str, Any]]:
        q: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=1000)
        with self._lock:
            self._subs.append((asyncio.get_running_loop(), q))
        return q

    def unsubscribe(self, q: asyncio.Queue[dict[str, Any]]) -> None:
        with self._lock:
            self._subs = [(lp, s) for lp, s in self._subs if s is not q]

    def publish(self, event: dict[str, Any]) -> None:
        with self._lock:
            subs = list(self._subs)
        for loop, q in subs:
            with suppress(RuntimeError):  # the loop closed under us: that subscriber is gone
                loop.call_soon_threadsafe(_offer, q, event)


def _offer(q: asyncio.Queue[dict[str, Any]], event: dict[str, Any]) -> None:
    with suppress(asyncio.QueueFull):
        q.put_nowait(event)
