"""The rollout server's HTTP surface: each route parses its input, calls one `RolloutService` verb
and renders the answer. The domain (state machine, scheduling, early stop) is in `service.py`.

Every route but `/health` and `/metrics` (which carry no secret) needs the `x-polar-control-token` header
when a control token is configured: writes (submit, cancel, node routes, callbacks, inference) and reads
(tasks, nodes, events) alike, and a task is shown with its secrets masked (`redaction.Secrets`). Every
error has the one control-route body (`nemo_polar.control.error_body`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from ...contracts import NodeRegistration, SessionResult, TaskSpec
from ...control import error_response, http_error, parse, query_float, read_json, route
from ...errors import ControlError, NotFound
from ...metrics import scrape
from ...serving import ServerThread, free_port, json_response, run
from .service import Heartbeat, RolloutConfig, RolloutService, StateReport
from .store import RolloutStore

SSE_KEEPALIVE_S = 15.0


class RolloutServer:
    """The routes over one `RolloutService`; `app` is the ASGI app."""

    def __init__(self, config: RolloutConfig, store: RolloutStore | None = None):
        self.config = config
        self.service = RolloutService(config, store)
        self.app = Starlette(
            routes=self._routes(), lifespan=self._lifespan, exception_handlers={HTTPException: http_error}
        )

    @property
    def control_token(self) -> str | None:
        return self.config.control_token

    @asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        await self.service.start()
        yield
        await self.service.stop()

    def _routes(self) -> list[Route]:
        return [
            Route("/health", self.health, methods=["GET"]),
            Route("/metrics", self.metrics, methods=["GET"]),
            Route("/tasks", self.submit, methods=["POST"]),
            Route("/tasks", self.list_tasks, methods=["GET"]),
            Route("/tasks/{task_id}", self.get_task, methods=["GET"]),
            Route("/tasks/{task_id}", self.cancel_task, methods=["DELETE"]),
            Route("/nodes", self.register, methods=["POST"]),
            Route("/nodes", self.list_nodes, methods=["GET"]),
            Route("/nodes/{node_id}/heartbeat", self.heartbeat, methods=["POST"]),
            Route("/nodes/{node_id}/drain", self.drain, methods=["POST"]),
            Route("/callbacks/session_result", self.session_result, methods=["POST"]),
            Route("/callbacks/session_state", self.session_state, methods=["POST"]),
            Route("/events", self.stream_events, methods=["GET"]),
            Route("/admin/inference/{action}", self.inference, methods=["POST"]),
        ]

    # --- tasks --------------------------------------------------------------------------------
    @route(guarded=False)
    async def health(self, request: Request) -> Response:
        return json_response(await self.service.health())

    @route(guarded=False)
    async def metrics(self, request: Request) -> Response:
        """Prometheus text format; read from the store in a worker thread, like every other read."""
        return await asyncio.to_thread(scrape, self.service.metrics.registry)

    @route(guarded=True)
    async def submit(self, request: Request) -> Response:
        limits = self.config.limits
        spec = parse(TaskSpec, await read_json(request, limits.max_body_bytes, limits.max_depth))
        task, sessions = await self.service.submit(spec)
        return json_response({"task_id": task.id, "status": task.status, "session_ids": [s.id for s in sessions]}, 201)

    @route(guarded=True)
    async def list_tasks(self, request: Request) -> Response:
        return json_response({"tasks": await self.service.tasks(request.query_params.get("status"))})

    @route(guarded=True)
    async def get_task(self, request: Request) -> Response:
        return json_response(await self.service.task(request.path_params["task_id"]))

    @route(guarded=True)
    async def cancel_task(self, request: Request) -> Response:
        task_id = request.path_params["task_id"]
        moved = await self.service.cancel(task_id)
        return json_response({"task_id": task_id, "cancelled_sessions": [s.id for s in moved]})

    # --- nodes --------------------------------------------------------------------------------
    @route(guarded=True)
    async def register(self, request: Request) -> Response:
        node = await self.service.register(parse(NodeRegistration, await read_json(request)))
        return json_response(node.as_json(), 201)

    @route(guarded=True)
    async def list_nodes(self, request: Request) -> Response:
        return json_response({"nodes": await self.service.nodes()})

    @route(guarded=True)
    async def heartbeat(self, request: Request) -> Response:
        hb = parse(Heartbeat, await read_json(request))
        node = await self.service.heartbeat(request.path_params["node_id"], hb.metrics)
        return json_response({"node_id": node.id, "draining": node.draining})

    @route(guarded=True)
    async def drain(self, request: Request) -> Response:
        return json_response((await self.service.drain(request.path_params["node_id"])).as_json())

    # --- callbacks from nodes -----------------------------------------------------------------
    @route(guarded=True)
    async def session_result(self, request: Request) -> Response:
        outcome = await self.service.record_result(parse(SessionResult, await read_json(request)))
        if outcome.duplicate:
            return json_response({"status": "ignored", "duplicate": True, "state": outcome.session.state.value})
        return json_response({"status": "accepted", "duplicate": False})

    @route(guarded=True)
    async def session_state(self, request: Request) -> Response:
        session, stale = await self.service.report_state(parse(StateReport, await read_json(request)))
        return json_response(session.as_json() | ({"stale": True} if stale else {}))

    # --- admin --------------------------------------------------------------------------------
    @route(guarded=True)
    async def inference(self, request: Request) -> Response:
        """Weight update: pause (or resume) generation on every live node; answers once each has drained."""
        action = request.path_params["action"]
        if action not in ("pause", "resume"):
            raise NotFound(f"unknown action {action!r}: pause or resume")
        timeout = query_float(request, "timeout_seconds", 300)
        ok, by_node = await self.service.inference(action, timeout, request.query_params.get("policy_version"))
        if not ok:
            failed = sorted(n for n, a in by_node.items() if not (a.get("status") or 500) < 300)
            return error_response(
                ControlError(f"{action}: nodes {failed} did not answer 2xx"), action=action, ok=ok, nodes=by_node
            )
        return json_response({"action": action, "ok": ok, "nodes": by_node})

    # --- events -------------------------------------------------------------------------------
    @route(guarded=True)
    async def stream_events(self, request: Request) -> Response:
        q = self.service.events.subscribe()

        async def gen() -> AsyncIterator[bytes]:
            try:
                yield b": connected\n\n"  # tells the client it is subscribed
                while True:
                    try:
                        event = await asyncio.wait_for(q.get(), SSE_KEEPALIVE_S)
                    except TimeoutError:
                        yield b": keep-alive\n\n"
                        continue
                    yield b"event: " + event["event"].encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"
            finally:
                self.service.events.unsubscribe(q)

        return StreamingResponse(
            gen(), media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        )


def serve(config: RolloutConfig) -> None:
    """`polar serve-rollout`: in the foreground until interrupted."""
    rollout = RolloutServer(config)
    try:
        print(f"polar rollout server on http://{config.host}:{config.port} (store {config.store.path})", flush=True)
        run(rollout.app, config.host, config.port)
    finally:
        rollout.service.store.close()


class RolloutThread(ServerThread):
    """A real rollout server on a thread of this process, for tests and `polar up`."""

    def __init__(self, config: RolloutConfig, store: RolloutStore | None = None):
        if config.port == 0:
            config = config.model_copy(update={"port": free_port(config.host)})
        self.server = RolloutServer(config, store)
        super().__init__(self.server.app, config.host, config.port, "polar-rollout")

    @property
    def service(self) -> RolloutService:
        return self.server.service

    def __enter__(self) -> RolloutThread:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop(10)
        self.server.service.store.close()
