"""A gateway node: the proxy plus the staged pipeline, registered with a rollout server.

One HTTP server per node: the harnesses' model API (the proxy) and the node routes below.
It registers at start-up, heartbeats its stage metrics, reports every state change and delivers
each session's result to the rollout server. A result is written to the node's outbox before it
is sent and removed only once acknowledged; whatever is left (the server was down, the node was
restarted) is sent again with every heartbeat. The server keeps the first result it gets, so a
retry is never counted twice.

    POST /sessions                  a DispatchRequest (202; 409 when the session is already here)
    GET /sessions/{id}              its state
    DELETE /sessions/{id}           cancel it (cleanup still runs)

The proxy's own /admin/inference/pause and /resume (weight updates) also hold and release new RUN
starts here: running sessions keep their sandboxes and only their model calls wait at the gate.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
from pydantic import Field, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route

from ...config import ProxyConfig, Strict
from ...errors import problems
from ...proxy.app import Proxy
from ...serving import ServerThread, json_response, run
from ..contracts import DispatchRequest, NodeCapacity, NodeRegistration, SessionResult, SessionState
from .pipeline import Pipeline, Session
from .stages import HarnessStages

log = logging.getLogger("nemo_polar.gateway")


def unauthorized() -> Response:
    return json_response({"error": {"message": "node routes need the x-polar-control-token header"}}, 401)


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
    control_token: str | None = None


class GatewayConfig(Strict):
    """`polar serve-gateway`: the node listens where its proxy is configured to."""

    proxy: ProxyConfig = ProxyConfig()
    node: NodeConfig = NodeConfig()


class GatewayNode:
    def __init__(self, config: NodeConfig, proxy: Proxy):
        if config.public_url is None:
            config = config.model_copy(update={"public_url": f"http://{proxy.config.host}:{proxy.config.port}"})
        # The sandboxes reach this port (the proxy is on it), so the node's own routes and the
        # proxy's admin routes always want a token; the rollout server learns it at registration.
        self.token = proxy.config.control_token or secrets.token_urlsafe(24)
        proxy.config = proxy.config.model_copy(update={"control_token": self.token})
        self.config, self.proxy = config, proxy
        cap = config.capacity
        root = Path(config.root).resolve()
        self.outbox = root / "outbox"
        self.outbox.mkdir(parents=True, exist_ok=True)
        _sweep(root, keep={"outbox", "traces", "logs"})
        stages = HarnessStages(proxy, config.public_url, root, config.node_id, self._deliver)
        self.pipeline = Pipeline(cap.init, cap.run, cap.postrun, cap.ready, stages, on_transition=self._report)
        proxy.gate.listeners.append(lambda paused: self.pipeline.pause() if paused else self.pipeline.resume())
        self.sessions: dict[str, Session] = {}
        headers = {"x-polar-control-token": config.control_token} if config.control_token else {}
        self.http = httpx.AsyncClient(base_url=config.rollout_url, timeout=10.0, headers=headers)
        self._tasks: set[asyncio.Task] = set()
        self._delivering: set[str] = set()  # outbox files whose first delivery is under way
        routes = [
            Route("/sessions", self.dispatch, methods=["POST"]),
            Route("/sessions/{session_id}", self.status, methods=["GET"]),
            Route("/sessions/{session_id}", self.cancel, methods=["DELETE"]),
            Mount("/", app=proxy.app),
        ]
        self.app = Starlette(routes=routes, lifespan=self._lifespan)

    @asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self.pipeline.start()
        beat = asyncio.create_task(self._heartbeat_loop())
        yield
        beat.cancel()
        await self.pipeline.close()
        for t in list(self._tasks):
            await asyncio.wait([t], timeout=5)
        await self.http.aclose()
        await self.proxy.upstream.close()

    def _authorized(self, request: Request) -> bool:
        return secrets.compare_digest(request.headers.get("x-polar-control-token", ""), self.token)

    async def dispatch(self, request: Request) -> Response:
        if not self._authorized(request):
            return unauthorized()
        try:
            req = DispatchRequest.model_validate_json(await request.body())
        except ValidationError as exc:
            return json_response({"error": {"message": "invalid dispatch: " + "; ".join(problems(exc))}}, 400)
        if req.session_id in self.sessions:
            return json_response({"session_id": req.session_id, "duplicate": True}, 409)
        session = Session.from_dispatch(req)
        self.sessions[req.session_id] = session
        self.pipeline.submit(session)
        return json_response({"session_id": req.session_id, "accepted": True}, 202)

    async def status(self, request: Request) -> Response:
        if not self._authorized(request):
            return unauthorized()
        session = self.sessions.get(request.path_params["session_id"])
        if session is None:
            return json_response({"error": {"message": "unknown session"}}, 404)
        return json_response({"session_id": session.session_id, "state": session.state.value, "cause": session.cause})

    async def cancel(self, request: Request) -> Response:
        if not self._authorized(request):
            return unauthorized()
        found = self.pipeline.cancel(request.path_params["session_id"], "cancelled by the rollout server")
        return json_response({"cancelled": found}, 200 if found else 404)

    # --- talking to the rollout server ------------------------------------------------------
    async def _heartbeat_loop(self) -> None:
        registration = NodeRegistration(
            node_id=self.config.node_id,
            url=self.config.public_url,
            capacity=self.config.capacity,
            heartbeat_s=self.config.heartbeat_s,
            token=self.token,
        )
        registered = False
        while True:
            try:
                # results first: registering tells the server that our earlier sessions are lost
                await self._flush_outbox()
                if not registered:
                    r = await self.http.post("/nodes", json=registration.model_dump(mode="json"))
                    registered = r.status_code < 300
                else:
                    metrics = self.pipeline.metrics().model_dump()
                    r = await self.http.post(f"/nodes/{self.config.node_id}/heartbeat", json={"metrics": metrics})
                    registered = r.status_code != 404  # the server forgot us: register again
            except httpx.HTTPError as exc:
                log.warning("rollout server unreachable: %s", exc)
            await asyncio.sleep(self.config.heartbeat_s)

    def _report(self, session_id: str, state: SessionState, cause: str | None) -> None:
        body = {"session_id": session_id, "state": state.value, "node_id": self.config.node_id}
        if state is not SessionState.REGISTERED and not state.terminal:  # a final state travels with its result
            self._spawn(self._post("/callbacks/session_state", body, attempts=3))

    async def _deliver(self, result: SessionResult) -> None:
        path = self.outbox / f"{result.session_id}.json"
        await asyncio.to_thread(_write_atomic, path, result.model_dump_json())
        self.sessions.pop(result.session_id, None)
        self._delivering.add(path.name)
        try:
            body = result.model_dump(mode="json")
            if await self._post("/callbacks/session_result", body, self.config.result_attempts):
                path.unlink(missing_ok=True)
            # else it stays in the outbox: the heartbeat loop sends it again
        finally:
            self._delivering.discard(path.name)

    async def _flush_outbox(self) -> None:
        for path in sorted(self.outbox.glob("*.json")):
            if path.name in self._delivering:  # its own delivery is still trying: not twice at once
                continue
            if not await self._post("/callbacks/session_result", orjson.loads(path.read_bytes()), attempts=1):
                return  # the server is still away: the next heartbeat tries again
            path.unlink(missing_ok=True)

    async def _post(self, path: str, body: dict[str, Any], attempts: int) -> bool:
        """True once the server answered (a 4xx refusal included: sending it again would not help)."""
        for attempt in range(attempts):
            try:
                r = await self.http.post(path, json=body)
                if r.status_code < 500:
                    if r.status_code >= 400:
                        log.warning("rollout server refused %s: %s", path, r.text[:200])
                    return True
            except httpx.HTTPError as exc:
                log.warning("posting %s failed (try %d): %s", path, attempt + 1, exc)
            if attempt + 1 < attempts:
                await asyncio.sleep(min(0.2 * 2**attempt, 5.0))
        log.warning("could not post %s for %s yet", path, body.get("session_id"))
        return False

    def _spawn(self, coro) -> None:
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
    proxy = Proxy(config.proxy)
    node = GatewayNode(config.node, proxy)
    try:
        print(
            f"polar gateway node {node.config.node_id} on {node.config.public_url}"
            f" -> rollout {config.node.rollout_url}, upstream {config.proxy.upstream.url}",
            flush=True,
        )
        run(node.app, config.proxy.host, config.proxy.port)
    finally:
        proxy.store.close()


class NodeThread(ServerThread):
    """A gateway node's server on a thread of this process, for tests and `polar up`."""

    def __init__(self, node: GatewayNode, host: str, port: int):
        super().__init__(node.app, host, port, "polar-node")

    def __enter__(self) -> NodeThread:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop(60)
