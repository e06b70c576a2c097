"""A gateway node's HTTP routes: the rollout server's side of a session, and the proxy behind them.

    POST /sessions                  a DispatchRequest (202; 409 when the session is already here)
    GET /sessions/{id}              its state (and the cause, its task's secrets masked)
    DELETE /sessions/{id}           cancel it (cleanup still runs)

The sandboxes reach this port (the proxy is on it), so the node's own routes and the proxy's
`/admin` routes always want the node's control token (the proxy's own when it has one, else one
minted at start), which the rollout server learns at registration.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ...contracts import DispatchRequest
from ...control import error_response, parse, read_json, require_token, route
from ...errors import NotFound, PolarError
from ...metrics import NodeGauges, scrape
from ...proxy.app import Proxy
from ...redaction import hidden, scrub
from ...serving import json_response
from .pipeline import Job


class Node(Protocol):
    """What the routes ask of a gateway node (`node.GatewayNode`)."""

    control_token: str
    proxy: Proxy
    gauges: NodeGauges
    jobs: dict[str, Job[Any]]

    def accept(self, request: DispatchRequest) -> bool: ...

    def cancel(self, session_id: str) -> bool: ...


class AdminGuard:
    """The proxy's app behind the node's token for `/admin/...`: a sandbox shares the node's port."""

    def __init__(self, app: ASGIApp, token: str):
        self.app, self.token = app, token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/admin/"):
            try:
                require_token(Request(scope), self.token)
            except PolarError as err:
                await error_response(err)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class NodeRoutes:
    """Each route parses its input, asks the node one thing and renders the answer."""

    def __init__(self, node: Node):
        self.node = node

    @property
    def control_token(self) -> str:
        return self.node.control_token

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/metrics", self.metrics, methods=["GET"]),
            Route("/sessions", self.dispatch, methods=["POST"]),
            Route("/sessions/{session_id}", self.status, methods=["GET"]),
            Route("/sessions/{session_id}", self.cancel, methods=["DELETE"]),
            Mount("/", app=AdminGuard(self.node.proxy.app, self.control_token)),
        ]

    async def metrics(self, request: Request) -> Response:
        """Prometheus text format: this node's pools and outbox, and its proxy's calls (open, like /health)."""
        node = self.node
        return await asyncio.to_thread(scrape, node.gauges.registry, *node.proxy.metric_registries())

    @route(guarded=True)
    async def dispatch(self, request: Request) -> Response:
        req = parse(DispatchRequest, await read_json(request))
        if not self.node.accept(req):
            return json_response({"session_id": req.session_id, "duplicate": True}, 409)
        return json_response({"session_id": req.session_id, "accepted": True}, 202)

    @route(guarded=True)
    async def status(self, request: Request) -> Response:
        job = self.node.jobs.get(request.path_params["session_id"])
        if job is None:
            raise NotFound(f"no session {request.path_params['session_id']!r} on this node")
        cause = scrub(job.cause, hidden())  # what a step failed with may repeat a secret of the task
        return json_response({"session_id": job.session_id, "state": job.state.value, "cause": cause})

    @route(guarded=True)
    async def cancel(self, request: Request) -> Response:
        session_id = request.path_params["session_id"]
        if not self.node.cancel(session_id):
            raise NotFound(f"no session {session_id!r} to cancel on this node (unknown, or already cleaning up)")
        return json_response({"cancelled": True})
