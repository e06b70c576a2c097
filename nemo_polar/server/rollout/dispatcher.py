"""Sending waiting sessions to gateway nodes, in batches. A failed POST puts the session back in the
queue; the node drops a dispatch it already has (same session id), so a retry never runs a session twice.

The dispatcher knows its planner only by the `Planner` protocol (the rollout service implements it)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Protocol

from ...contracts import DispatchRequest
from ...errors import ControlError
from ..client import NodeAPI, NodeTarget
from .store import NodeRow

log = logging.getLogger("nemo_polar.rollout")


@dataclass(frozen=True, slots=True)
class Dispatch:
    node: NodeRow
    request: DispatchRequest
    attempt: int


class Planner(Protocol):
    def next_dispatches(self, limit: int) -> list[Dispatch]: ...
    def dispatch_failed(self, session_id: str, cause: str = ...) -> object: ...


async def dispatch_loop(planner: Planner, nodes: NodeAPI, idle_s: float = 0.1, batch: int = 64) -> None:
    while True:
        try:
            dispatches = await asyncio.to_thread(planner.next_dispatches, batch)
        except Exception:  # a dead dispatcher would strand every waiting session
            log.exception("picking the next dispatches failed")
            dispatches = []
        if not dispatches:
            await asyncio.sleep(idle_s)
            continue
        await asyncio.gather(*(_send(planner, nodes, d) for d in dispatches))


async def _send(planner: Planner, nodes: NodeAPI, dispatch: Dispatch) -> None:
    try:
        await nodes.dispatch(NodeTarget.of(dispatch.node.registration), dispatch.request)
    except ControlError as exc:
        session_id = dispatch.request.session_id
        log.warning("dispatch of %s to %s failed: %s", session_id, dispatch.node.id, exc.message)
        try:
            await asyncio.to_thread(planner.dispatch_failed, session_id, f"dispatch failed: {exc.message}")
        except Exception:  # a dead dispatcher would strand every waiting session
            log.exception("putting %s back in the queue failed", session_id)
