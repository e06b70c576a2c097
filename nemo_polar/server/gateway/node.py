"""A gateway node: the proxy plus the staged pipeline, registered with a rollout server.

One HTTP server per node: the harnesses' model API (the proxy) and the node routes below.
It registers at start-up, heartbeats its stage metrics, reports every state change and delivers
each session's result to the rollout server. A result is written to the node's outbox before it
is sent and removed only once acknowledged; whatever is left (the server was down, the node was
restarted) is sent again with every heartbeat. The server keeps the first result it gets, so a
retry is never counted twice. The event loop serves the harnesses' calls: the outbox is read and
written in worker threads, like every disk step of the stages.

    POST /sessions                  a DispatchRequest (202; 409 when the session is already here)
    GET /sessions/{id}              its state
    DELETE /sessions/{id}           cancel it (cleanup still runs)

The sandboxes reach this port (the proxy is on it), so the node's own routes and the proxy's
`/admin` routes always want the node's control token (the proxy's own when it has one, else one
minted at start), which the rollout server learns at registration. The proxy's
/admin/inference/pause and /resume (weight updates) also hold and release new RUN starts here:
running sessions keep their sandboxes and only their model calls wait at the gate.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import shutil
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
from pydantic import Field
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ...config import ProxyConfig, Strict
from ...contracts import DispatchRequest, NodeCapacity, NodeRegistration, SessionResult
from ...control import error_response, http_error, parse, read_json, require_token, route
from ...errors import ControlError, ControlRefused, NotFound, PolarError
from ...metrics import NodeGauges, scrape
from ...proxy.app import Proxy
from ...serving import ServerThread, json_response, run
from ...states import SessionState
from ..client import Retry, RolloutAPI
from .pipeline import Job, Pipeline
from .proxy_surface import ProxySurface
from .stages import HarnessStages, Work

log = logging.getLogger("nemo_polar.gateway")
STATE_REPORT = Retry(attempts=3)


class NodeConfig(Strict):
    node_id: str = "node-0"
    rollout_url: str = "http://127.0.0.1:8900"
    public_url: str | None = Field(
        None, description="how the rollout server and harnesses reach us (default: the proxy)"
    )
    root: str = Field("runs/node", description="session folders, traces and the result outbox")
    capacity: NodeCapacity = NodeCapacity()
    heartbeat_s: float = Field(2.0, gt=0)
    result_attempts: int = Field(8, ge=1, description="tries per result before it waits in the outbox")
    control_token: str | None = Field(None, description="the rollout server's, when it has one")


class GatewayConfig(Strict):
    """`polar serve-gateway`: the node listens where its proxy is configured to."""

    proxy: ProxyConfig = ProxyConfig()
    node: NodeConfig = NodeConfig()


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


class GatewayNode:
    def __init__(self, config: NodeConfig, proxy: Proxy | ProxySurface):
        self.proxy: ProxySurface = proxy
        if config.public_url is None:
            proxy_config = proxy.config if isinstance(proxy, Proxy) else None
            assert proxy_config is not None, "NodeConfig.public_url is required with a proxy surface"
            config = config.model_copy(update={"public_url": f"http://{proxy_config.host}:{proxy_config.port}"})
        self.config = config
        self.control_token = self.proxy.control_token or secrets.token_urlsafe(24)
        root = Path(config.root).resolve()
        self.outbox = root / "outbox"
        self.outbox.mkdir(parents=True, exist_ok=True)
        _sweep(root, keep={"outbox", "traces", "logs"})
        self.stages = HarnessStages(self.proxy, config.public_url, root, config.node_id, self._deliver)
        cap = config.capacity
        self.pipeline: Pipeline[Work] = Pipeline(
            cap.init, cap.run, cap.postrun, cap.ready, self.stages, on_transition=self._report
        )
        self.proxy.on_pause(lambda paused: self.pipeline.pause() if paused else self.pipeline.resume())
        self.jobs: dict[str, Job[Work]] = {}
        self.rollout = RolloutAPI(config.rollout_url, config.control_token, timeout_s=10.0)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._delivering: set[str] = set()  # outbox files whose first delivery is under way
        self.gauges = NodeGauges(self._pools, lambda: sum(1 for _ in self.outbox.glob("*.json")))
        routes = [
            Route("/metrics", self.metrics, methods=["GET"]),
            Route("/sessions", self.dispatch, methods=["POST"]),
            Route("/sessions/{session_id}", self.status, methods=["GET"]),
            Route("/sessions/{session_id}", self.cancel, methods=["DELETE"]),
            Mount("/", app=AdminGuard(self.proxy.app, self.control_token)),
        ]
        self.app = Starlette(routes=routes, lifespan=self._lifespan, exception_handlers={HTTPException: http_error})

    @asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self.pipeline.start()
        beat = asyncio.create_task(self._heartbeat_loop())
        yield
        beat.cancel()
        await self.pipeline.close()
        for t in list(self._tasks):
            await asyncio.wait([t], timeout=5)
        await self.rollout.close()
        await self.proxy.aclose()

    def _pools(self) -> dict[str, int]:
        m = self.pipeline.metrics()
        return {
            "init_queue": m.init_queue,
            "init": m.init_inflight,
            "ready": m.ready,
            "run": m.run_inflight,
            "postrun_queue": m.postrun_queue,
            "postrun": m.postrun_inflight,
        }

    async def metrics(self, request: Request) -> Response:
        """Prometheus text format: this node's pools and outbox, and its proxy's calls (open, like /health)."""
        return await asyncio.to_thread(scrape, self.gauges.registry, *self.proxy.metric_registries())

    # --- the node's routes (the rollout server's side of a session) ---------------------------
    @route(guarded=True)
    async def dispatch(self, request: Request) -> Response:
        req = parse(DispatchRequest, await read_json(request))
        if req.session_id in self.jobs:
            return json_response({"session_id": req.session_id, "duplicate": True}, 409)
        job = self.stages.job(req)
        self.jobs[req.session_id] = job
        self.pipeline.submit(job)
        return json_response({"session_id": req.session_id, "accepted": True}, 202)

    @route(guarded=True)
    async def status(self, request: Request) -> Response:
        job = self.jobs.get(request.path_params["session_id"])
        if job is None:
            raise NotFound(f"no session {request.path_params['session_id']!r} on this node")
        return json_response({"session_id": job.session_id, "state": job.state.value, "cause": job.cause})

    @route(guarded=True)
    async def cancel(self, request: Request) -> Response:
        session_id = request.path_params["session_id"]
        if not self.pipeline.cancel(session_id, "cancelled by the rollout server"):
            raise NotFound(f"no session {session_id!r} to cancel on this node (unknown, or already cleaning up)")
        return json_response({"cancelled": True})

    # --- talking to the rollout server ------------------------------------------------------
    async def _heartbeat_loop(self) -> None:
        registration = NodeRegistration(
            node_id=self.config.node_id,
            url=self.config.public_url,
            capacity=self.config.capacity,
            heartbeat_s=self.config.heartbeat_s,
            token=self.control_token,
        )
        registered = False
        while True:
            try:
                # results first: registering tells the server that our earlier sessions are lost
                await self._flush_outbox()
                if not registered:
                    await self.rollout.register(registration)
                    registered = True
                else:
                    metrics = self.pipeline.metrics().model_copy(update={"recording": self.proxy.recording})
                    await self.rollout.heartbeat(self.config.node_id, metrics)
            except ControlRefused as exc:
                if exc.status_code == 404:  # the server forgot us: register again
                    registered = False
                log.warning("rollout server refused: %s", exc)
            except ControlError as exc:
                log.warning("rollout server unreachable: %s", exc)
            except Exception:  # noqa: BLE001 - a node whose heartbeats stop is a lost node: never let them
                log.exception("heartbeat failed; trying again in %.1fs", self.config.heartbeat_s)
            await asyncio.sleep(self.config.heartbeat_s)

    def _report(self, session_id: str, state: SessionState, cause: str | None) -> None:
        if state is not SessionState.REGISTERED and not state.terminal:  # a final state travels with its result
            self._spawn(self.rollout.report_state(session_id, state, self.config.node_id, STATE_REPORT))

    async def _deliver(self, result: SessionResult) -> None:
        path = self.outbox / f"{result.session_id}.json"
        await asyncio.to_thread(_write_atomic, path, result.model_dump_json())
        self.jobs.pop(result.session_id, None)
        self._delivering.add(path.name)
        try:
            if await self.rollout.deliver(result, Retry(attempts=self.config.result_attempts)):
                await asyncio.to_thread(path.unlink, True)
            # else it stays in the outbox: the heartbeat loop sends it again
        finally:
            self._delivering.discard(path.name)

    async def _flush_outbox(self) -> None:
        for path in sorted(await asyncio.to_thread(lambda: list(self.outbox.glob("*.json")))):
            if path.name in self._delivering:  # its own delivery is still trying: not twice at once
                continue
            if not await self.rollout.deliver(orjson.loads(await asyncio.to_thread(path.read_bytes))):
                return  # the server is still away: the next heartbeat tries again
            await asyncio.to_thread(path.unlink, True)

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _sweep(root: Path, keep: set[str]) -> None:
    """Session folders left by a node that died: their sessions are lost (the server knows it once we
    register again), and their sandboxes died with the node (bubblewrap's --die-with-parent)."""
    for path in root.iterdir():
        if path.name not in keep and path.is_dir():
            log.warning("removing %s, left by an earlier run of this node", path)
            shutil.rmtree(path, ignore_errors=True)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)  # a crash leaves the old file or the new one, never half of one


def serve(config: GatewayConfig) -> None:
    """`polar serve-gateway`: one node (proxy + pipeline) in the foreground until interrupted."""
    node = GatewayNode(config.node, Proxy(config.proxy))
    try:
        print(
            f"polar gateway node {node.config.node_id} on {node.config.public_url}"
            f" -> rollout {config.node.rollout_url}, upstream {config.proxy.upstream.url}",
            flush=True,
        )
        run(node.app, config.proxy.host, config.proxy.port)
    finally:
        node.proxy.close()


class NodeThread(ServerThread):
    """A gateway node's server on a thread of this process, for tests and `polar up`."""

    def __init__(self, node: GatewayNode, host: str, port: int):
        super().__init__(node.app, host, port, "polar-node")

    def __enter__(self) -> NodeThread:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop(60)
