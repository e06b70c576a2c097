"""Sending waiting sessions to gateway nodes. A failed POST puts the session back in the queue;
the node drops a dispatch it already has (same session id), so a retry never runs a session twice."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import aiohttp

if TYPE_CHECKING:
    from .app import Dispatch, RolloutServer
    from .store import NodeRow

log = logging.getLogger("nemo_polar.rollout")
JSON = {"content-type": "application/json"}


def node_headers(node: NodeRow) -> dict[str, str]:
    """What a node's own routes want: the token it registered with."""
    token = node.registration.token
    return {"x-polar-control-token": token} if token else {}


async def dispatch_loop(server: RolloutServer, idle_s: float = 0.1, batch: int = 64) -> None:
    # aiohttp, not httpx: httpx's pool scans every connection per request, quadratic in a burst
    timeout = aiohttp.ClientTimeout(total=10.0)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=batch)) as http:
        while True:
            try:
                dispatches = await asyncio.to_thread(server.next_dispatches, batch)
            except Exception:  # a dead dispatcher would strand every waiting session
                log.exception("picking the next dispatches failed")
                dispatches = []
            if not dispatches:
                await asyncio.sleep(idle_s)
                continue
            await asyncio.gather(*(_send(server, http, d) for d in dispatches))


async def _send(server: RolloutServer, http: aiohttp.ClientSession, dispatch: Dispatch) -> None:
    url = dispatch.node.registration.url.rstrip("/") + "/sessions"
    try:
        headers = JSON | node_headers(dispatch.node)
        async with http.post(url, data=dispatch.request.model_dump_json(), headers=headers) as r:
            if r.status not in (200, 202, 409):  # 409: the node already has it
                raise aiohttp.ClientResponseError(r.request_info, (), status=r.status, message=(await r.text())[:200])
    except (aiohttp.ClientError, TimeoutError) as exc:
        log.warning("dispatch of %s to %s failed: %r", dispatch.request.session_id, dispatch.node.id, exc)
        await asyncio.to_thread(server.dispatch_failed, dispatch.request.session_id, f"dispatch failed: {exc!r}")
