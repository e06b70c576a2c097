"""Sending waiting sessions to gateway nodes. A failed POST puts the session back in the queue;
the node drops a dispatch it already has (same session id), so a retry never runs a session twice."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import httpx

if TYPE_CHECKING:
    from .app import RolloutServer

log = logging.getLogger("nemo_polar.rollout")


async def dispatch_loop(server: RolloutServer, idle_s: float = 0.1) -> None:
    headers = {"x-polar-control-token": server.config.control_token} if server.config.control_token else {}
    async with httpx.AsyncClient(timeout=10.0, headers=headers) as http:
        while True:
            try:
                dispatch = await asyncio.to_thread(server.next_dispatch)
            except Exception:  # a dead dispatcher would strand every waiting session
                log.exception("picking the next dispatch failed")
                dispatch = None
            if dispatch is None:
                await asyncio.sleep(idle_s)
                continue
            url = dispatch.node.registration.url.rstrip("/") + "/sessions"
            try:
                r = await http.post(url, json=dispatch.request.model_dump(mode="json"))
                if r.status_code not in (200, 202, 409):  # 409: the node already has it
                    raise httpx.HTTPStatusError(f"HTTP {r.status_code}: {r.text[:200]}", request=r.request, response=r)
            except httpx.HTTPError as exc:
                log.warning("dispatch of %s to %s failed: %s", dispatch.request.session_id, dispatch.node.id, exc)
                await asyncio.to_thread(server.dispatch_failed, dispatch.request.session_id, f"dispatch failed: {exc}")
