"""The rollout server's HTTP surface: tasks in, sessions out to gateway nodes, results back.

Every state lives in the `RolloutStore` (SQLite), none only in memory, so a restart loses no task,
session or result; `recover()` runs at start-up. The only in-memory state is what a restart may
lose without harm: dispatch reservations (reset by the next heartbeat) and SSE subscribers.

Node routes (register, heartbeat, drain, callbacks) and admin routes (submit, cancel) need the
`x-polar-control-token` header when a control token is configured; reads are open.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import orjson
from pydantic import BaseModel, Field, ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from ...config import Strict
from ...errors import problems
from ...serving import ServerThread, free_port, json_response, run
from ..contracts import DispatchRequest, NodeMetrics, NodeRegistration, SessionResult, SessionState, TaskSpec
from . import scheduler
from .dispatcher import dispatch_loop, node_headers
from .store import IllegalMove, NodeRow, RolloutStore, SessionRow, StoreError

log = logging.getLogger("nemo_polar.rollout")


class RolloutStoreConfig(Strict):
    path: str = "runs/rollout/rollout.sqlite"


class RolloutConfig(Strict):
    host: str = "127.0.0.1"
    port: int = Field(8900, ge=0, le=65535)
    public_url: str | None = Field(None, description="how nodes reach us; default http://host:port")
    control_token: str | None = Field(None, description="required on node and admin routes when set")
    callback_timeout_s: float = Field(10.0, gt=0, description="for the task-result POST to callback_url")
    reap_interval_s: float = Field(1.0, gt=0, description="how often stale nodes are looked for")
    timeout_grace_s: float = Field(
        60.0, ge=0, description="past session_timeout_s + this with no result, the server ends a session in timeout"
    )
    keep_live_nodes_on_restart: bool = Field(
        True,
        description="on start-up, keep in-flight sessions of nodes whose last heartbeat is recent: the reaper"
        " fails them later if the node is really gone. Off: every in-flight session ends in error",
    )
    dispatch: bool = Field(True, description="send waiting sessions to registered gateway nodes")
    store: RolloutStoreConfig = RolloutStoreConfig()


def _body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text[:200]


def _nobody(node_id: str) -> bool:
    return False


class ApiError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class StateReport(BaseModel):
    """A node's progress report for one session (initializing, ready, running, ...)."""

    session_id: str
    state: SessionState
    node_id: str | None = None


class Heartbeat(BaseModel):
    metrics: NodeMetrics = NodeMetrics()


@dataclass(frozen=True, slots=True)
class Dispatch:
    node: NodeRow
    request: DispatchRequest
    attempt: int


def error_body(status: int, message: str) -> dict[str, Any]:
    return {"error": {"status": status, "message": message}}


def parse(model: type[BaseModel], data: Any) -> Any:
    """A pydantic model or a 400 naming every bad field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ApiError(400, f"invalid {model.__name__}: " + "; ".join(problems(exc, whole="(body)"))) from None


class Broadcaster:
    """Fans state-change events out to SSE subscribers; safe to publish from any thread."""

    def __init__(self) -> None:
        self._subs: list[tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = []
        self._lock = threading.Lock()

    def subscribe(self) -> asyncio.Queue:
        q: asyncio.Queue = asyncio.Queue(maxsize=1000)
        with self._lock:
            self._subs.append((asyncio.get_running_loop(), q))
        return q

    def unsubscribe(self, q: asyncio.Queue) -> None:
        with self._lock:
            self._subs = [(lp, s) for lp, s in self._subs if s is not q]

    def publish(self, event: dict[str, Any]) -> None:
        with self._lock:
            subs = list(self._subs)
        for loop, q in subs:
            with suppress(RuntimeError):  # the loop closed under us: that subscriber is gone
                loop.call_soon_threadsafe(_offer, q, event)


def _offer(q: asyncio.Queue, event: dict[str, Any]) -> None:
    with suppress(asyncio.QueueFull):  # a subscriber that does not read loses events, not the server
        q.put_nowait(event)


Handler = Callable[["RolloutServer", Request], Awaitable[Response]]


def route(*, control: bool = False) -> Callable[[Handler], Handler]:
    """Error mapping (and the control-token check) around a handler."""

    def wrap(handler: Handler) -> Handler:
        async def wrapped(self: RolloutServer, request: Request) -> Response:
            try:
                if control:
                    self._check_token(request)
                return await handler(self, request)
            except ApiError as err:
                return json_response(error_body(err.status, err.message), err.status)
            except StoreError as err:
                return json_response(error_body(err.status_code, str(err)), err.status_code)

        return wrapped

    return wrap


async def _http_error(request: Request, exc: Exception) -> Response:
    """Unknown paths and methods answer in the same JSON error shape as everything else."""
    assert isinstance(exc, HTTPException)
    return json_response(
        error_body(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}"), exc.status_code
    )


async def body(request: Request) -> Any:
    raw = await request.body()
    if not raw.strip():
        return {}  # e.g. a heartbeat with nothing to say; models report what is missing
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, f"the body is not JSON: {exc}") from None


class RolloutServer:
    def __init__(self, config: RolloutConfig, store: RolloutStore | None = None):
        self.config = config
        self.store = store or RolloutStore(config.store.path)
        self.events = Broadcaster()
        self.reservations: dict[str, int] = {}
        self._lock = threading.Lock()  # next_dispatch may be called from a dispatcher thread
        self.recovered = self.store.recover(self._alive_at_start if config.keep_live_nodes_on_restart else _nobody)
        self._loop: asyncio.AbstractEventLoop | None = None  # set while serving; callbacks run on it
        self._callbacks: set[asyncio.Future] = set()
        self.app = Starlette(
            routes=self._routes(), lifespan=self._lifespan, exception_handlers={HTTPException: _http_error}
        )

    def _alive_at_start(self, node_id: str) -> bool:
        """Alive when we went down (its heartbeats could not reach us since). It gets a fresh
        heartbeat window now: if it does not call again, the reaper ends its sessions as lost."""
        node = next((n for n in self.store.nodes() if n.id == node_id), None)
        if node is None or not scheduler.alive(node, self.store.last_activity()):
            return False
        self.store.heartbeat(node.id, node.metrics)
        return True

    @property
    def public_url(self) -> str:
        return self.config.public_url or f"http://{self.config.host}:{self.config.port}"

    @asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self._loop = asyncio.get_running_loop()
        reaper = asyncio.create_task(self._reap_loop())
        dispatcher = asyncio.create_task(dispatch_loop(self)) if self.config.dispatch else None
        yield
        self._loop = None
        reaper.cancel()
        if dispatcher is not None:
            dispatcher.cancel()
        for t in list(self._callbacks):
            t.cancel()

    def _routes(self) -> list[Route]:
        return [
            Route("/health", self.health, methods=["GET"]),
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

    def _check_token(self, request: Request) -> None:
        token = self.config.control_token
        if token and request.headers.get("x-polar-control-token") != token:
            raise ApiError(401, "node and admin routes need the x-polar-control-token header")

    def _emit(self, kind: str, **fields: Any) -> None:
        self.events.publish({"event": kind, "at": time.time(), **fields})

    def _emit_session(self, s: SessionRow, cause: str) -> None:
        self._emit("session", session_id=s.id, task_id=s.task_id, state=s.state.value, node_id=s.node_id, cause=cause)

    # --- tasks --------------------------------------------------------------------------------
    @route()
    async def health(self, request: Request) -> Response:
        now = time.time()
        nodes = self.store.nodes()
        return json_response(
            {"status": "ok", "nodes": len(nodes), "healthy_nodes": sum(scheduler.healthy(n, now) for n in nodes)}
        )

    @route(control=True)
    async def submit(self, request: Request) -> Response:
        spec = parse(TaskSpec, await body(request))
        task, sessions = self.store.submit(spec)
        self._emit("task", task_id=task.id, status=task.status)
        return json_response({"task_id": task.id, "status": task.status, "session_ids": [s.id for s in sessions]}, 201)

    @route()
    async def list_tasks(self, request: Request) -> Response:
        tasks = self.store.tasks(request.query_params.get("status"))
        return json_response({"tasks": [t.as_json() | {"counts": self.store.counts(t.id)} for t in tasks]})

    @route()
    async def get_task(self, request: Request) -> Response:
        return json_response(self.task_result(request.path_params["task_id"]))

    def task_result(self, task_id: str) -> dict[str, Any]:
        """The task, its sessions with states and results, counts by state: also the callback's body."""
        task = self.store.task(task_id)
        sessions = self.store.sessions(task_id)
        return task.as_json() | {
            "spec": task.spec.model_dump(mode="json"),
            "counts": self.store.counts(task_id),
            "sessions": [s.as_json() for s in sessions],
        }

    @route(control=True)
    async def cancel_task(self, request: Request) -> Response:
        task_id = request.path_params["task_id"]
        # the trainer asked for this, so no callback is posted; a finished task is left as it is
        moved = self.store.cancel(task_id)
        for s in moved:
            self._emit_session(s, "task cancelled")
        self._stop_on_nodes(moved)
        self._emit("task", task_id=task_id, status=self.store.task(task_id).status)
        return json_response({"task_id": task_id, "cancelled_sessions": [s.id for s in moved]})

    # --- nodes --------------------------------------------------------------------------------
    @route(control=True)
    async def register(self, request: Request) -> Response:
        registration = parse(NodeRegistration, await body(request))
        # A node registers when its process starts: whatever we still think runs there is lost.
        await asyncio.to_thread(self._lose_sessions, registration.node_id, "node restarted")
        node = self.store.register_node(registration)
        self.reservations[node.id] = 0
        self._emit("node", node_id=node.id, status="registered")
        return json_response(node.as_json(), 201)

    @route()
    async def list_nodes(self, request: Request) -> Response:
        now = time.time()
        rows = [
            n.as_json() | {"healthy": scheduler.healthy(n, now), "reserved": self.reservations.get(n.id, 0)}
            for n in self.store.nodes()
        ]
        return json_response({"nodes": rows})

    @route(control=True)
    async def heartbeat(self, request: Request) -> Response:
        hb = parse(Heartbeat, await body(request))
        node = self.store.heartbeat(request.path_params["node_id"], hb.metrics)
        self.reservations[node.id] = 0  # its metrics now count what we dispatched before
        return json_response({"node_id": node.id, "draining": node.draining})

    @route(control=True)
    async def drain(self, request: Request) -> Response:
        node = self.store.drain(request.path_params["node_id"])
        self._emit("node", node_id=node.id, status="draining")
        return json_response(node.as_json())

    # --- callbacks from nodes -----------------------------------------------------------------
    @route(control=True)
    async def session_result(self, request: Request) -> Response:
        result = parse(SessionResult, await body(request))
        outcome = self.store.record_result(result)
        if outcome.duplicate:
            return json_response({"status": "ignored", "duplicate": True, "state": outcome.session.state.value})
        self._emit_session(outcome.session, "result")
        if outcome.task_finished:
            self._task_finished(result.task_id)
        self._early_stop(result.task_id)
        return json_response({"status": "accepted", "duplicate": False})

    @route(control=True)
    async def session_state(self, request: Request) -> Response:
        report = parse(StateReport, await body(request))
        try:
            s = self.store.move(
                report.session_id, report.state, f"reported by {report.node_id or 'node'}", report.node_id
            )
        except IllegalMove:
            # reports cross on the network: one that does not move the session forward is stale, not wrong
            s = self.store.session(report.session_id)
            if s.node_id is not None and report.node_id is not None and s.node_id != report.node_id:
                raise
            return json_response(s.as_json() | {"stale": True})
        self._emit_session(s, "reported")
        return json_response(s.as_json())

    def _early_stop(self, task_id: str) -> None:
        """Once `early_stop_k` sessions of the task completed, or of its GRPO group when its samples came
        as one task each, the stragglers are cancelled (masked, never scored 0)."""
        task = self.store.task(task_id)
        k, group = task.spec.early_stop_k, task.spec.group_id
        if k is None:
            return
        if group is None:
            done, tasks = self.store.counts(task_id).get("completed", 0), [task]
        else:
            done, tasks = self.store.group_completed(group), self.store.group(group)
        if done < k:
            return
        for t in tasks:
            if t.status != "running":
                continue
            moved = self.store.cancel(t.id, f"early stop: {k} sessions completed", task_status="completed")
            for s in moved:
                self._emit_session(s, "early stop")
            self._stop_on_nodes(moved)
            if moved:
                self._task_finished(t.id)

    def _stop_on_nodes(self, sessions: list[SessionRow]) -> None:
        """Cancelled here, so the nodes stop them too and free their slots (their late results are ignored)."""
        nodes = {n.id: n for n in self.store.nodes()}
        targets = [(nodes[s.node_id], f"/sessions/{s.id}") for s in sessions if s.node_id in nodes]
        if targets and self._loop is not None:
            self._spawn(self._fan_out("DELETE", targets))

    async def _fan_out(self, method: str, targets: list[tuple[NodeRow, str]], timeout_s: float = 10.0) -> dict:
        """One request to each (node, path) at once; the answer (or the failure) of each, by URL. Best effort."""
        urls = [node.registration.url.rstrip("/") + path for node, path in targets]
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            answers = await asyncio.gather(
                *(client.request(method, u, headers=node_headers(n)) for u, (n, _) in zip(urls, targets, strict=True)),
                return_exceptions=True,
            )
        out: dict[str, Any] = {}
        for url, a in zip(urls, answers, strict=True):
            out[url] = repr(a) if isinstance(a, BaseException) else {"status": a.status_code, "body": _body(a)}
            if isinstance(a, BaseException) or a.status_code >= 500:
                log.warning("%s %s failed: %s", method, url, out[url])
        return out

    def _spawn(self, coro: Awaitable[Any]) -> None:
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)  # type: ignore[arg-type]
        self._callbacks.add(fut)
        fut.add_done_callback(self._callbacks.discard)

    @route(control=True)
    async def inference(self, request: Request) -> Response:
        """Weight update: pause (or resume) generation on every live node; answers once each has drained."""
        action = request.path_params["action"]
        if action not in ("pause", "resume"):
            raise ApiError(404, f"unknown action {action!r}: pause or resume")
        timeout = float(request.query_params.get("timeout_seconds", 300))
        now = time.time()
        nodes = [n for n in self.store.nodes() if scheduler.alive(n, now)]
        path = f"/admin/inference/{action}?timeout_seconds={timeout}"
        if action == "resume" and "policy_version" in request.query_params:  # the weights the nodes now serve
            path += "&policy_version=" + quote(request.query_params["policy_version"])
        answers = await self._fan_out("POST", [(n, path) for n in nodes], timeout + 10)
        by_node = {n.id: answers[n.registration.url.rstrip("/") + path] for n in nodes}
        ok = all(isinstance(a, dict) and a["status"] < 300 for a in by_node.values())
        self._emit("inference", action=action, ok=ok)
        return json_response({"action": action, "ok": ok, "nodes": by_node}, 200 if ok else 502)

    def _task_finished(self, task_id: str) -> None:
        """Called once per task, by whoever made its last session final; works from any thread."""
        task = self.store.task(task_id)
        self._emit("task", task_id=task_id, status=task.status)
        if task.spec.callback_url and self._loop is None:
            log.warning("task %s finished while not serving: its callback is not posted (poll GET /tasks)", task_id)
        elif task.spec.callback_url and self._loop is not None:
            self._spawn(self._post_callback(task.spec.callback_url, task_id))

    async def _post_callback(self, url: str, task_id: str) -> None:
        """Best effort, once: the trainer can always poll GET /tasks/{id}."""
        try:
            async with httpx.AsyncClient(timeout=self.config.callback_timeout_s) as client:
                r = await client.post(
                    url, content=orjson.dumps(self.task_result(task_id)), headers={"content-type": "application/json"}
                )
            log.info("task %s result posted to %s: %s", task_id, url, r.status_code)
        except httpx.HTTPError as exc:
            log.warning("task %s result could not be posted to %s: %r", task_id, url, exc)

    # --- events -------------------------------------------------------------------------------
    @route()
    async def stream_events(self, request: Request) -> Response:
        q = self.events.subscribe()

        async def gen() -> AsyncIterator[bytes]:
            try:
                yield b": connected\n\n"  # tells the client it is subscribed
                while True:
                    try:
                        event = await asyncio.wait_for(q.get(), 15)
                    except TimeoutError:
                        yield b": keep-alive\n\n"
                        continue
                    yield b"event: " + event["event"].encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"
            finally:
                self.events.unsubscribe(q)

        return StreamingResponse(
            gen(), media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        )

    # --- dispatch (driven by whoever sends sessions to nodes) ---------------------------------
    def next_dispatch(self) -> Dispatch | None:
        """The highest-priority waiting session and the node to run it, marked dispatched; None if none fits."""
        batch = self.next_dispatches(1)
        return batch[0] if batch else None

    def next_dispatches(self, limit: int) -> list[Dispatch]:
        """Up to `limit` waiting sessions, each placed on the least loaded node as the batch fills them.
        Stale nodes get none (`scheduler.pick`); their sessions are the reaper's (`reap_stale`)."""
        with self._lock:
            waiting = self.store.waiting(limit)
            nodes, now, plan = self.store.nodes(), time.time(), []
            for session in waiting:
                node = scheduler.pick(nodes, self.reservations, now)
                if node is None:
                    break
                self.reservations[node.id] = self.reservations.get(node.id, 0) + 1
                plan.append((session.id, node))
            if not plan:
                return []
            rows = self.store.mark_dispatched_many([(sid, node.id) for sid, node in plan])
        specs = {t: self.store.task(t).spec for t in {s.task_id for s in rows}}
        out = []
        for s, (_, node) in zip(rows, plan, strict=True):
            request = DispatchRequest(
                session_id=s.id,
                task=specs[s.task_id],
                sample_index=s.sample_index,
                callback_url=f"{self.public_url}/callbacks/session_result",
            )
            self._emit_session(s, f"dispatched to {node.id}")
            out.append(Dispatch(node, request, s.attempt))
        return out

    def dispatch_failed(self, session_id: str, cause: str = "dispatch failed") -> SessionRow:
        """The POST to the node failed: back in the queue, its reservation released."""
        s = self.store.session(session_id)
        if s.node_id and self.reservations.get(s.node_id, 0) > 0:
            self.reservations[s.node_id] -= 1
        return self.store.requeue(session_id, cause)

    def reap_stale(self) -> list[SessionRow]:
        """Sessions of nodes whose heartbeats stopped: unstarted ones re-queued, running ones failed."""
        changed = []
        for node in scheduler.stale(self.store.nodes(), time.time()):
            changed += self._lose_sessions(node.id, scheduler.NODE_LOST)
        return changed + self.expire_overdue()

    def _lose_sessions(self, node_id: str, cause: str) -> list[SessionRow]:
        """A node's live sessions when it is gone: unstarted ones re-queued, started ones failed."""
        changed = []
        requeue, fail = scheduler.lost_plan(self.store.live_sessions(node_id))
        for s in requeue:
            with suppress(IllegalMove):  # it moved on (a late report) since we looked: leave it
                changed.append(self.store.requeue(s.id, cause))
        for s in fail:
            outcome = self.store.fail(s.id, cause)
            if outcome.duplicate:  # its result arrived since we looked
                continue
            changed.append(outcome.session)
            if outcome.task_finished:
                self._task_finished(s.task_id)
        for s in changed:
            self._emit_session(s, cause)
        self._stop_on_nodes([s for s in fail if s.node_id])  # a node that is only slow stops them too
        return changed

    def expire_overdue(self) -> list[SessionRow]:
        """The backstop for a node that is alive but never reports a session: timeout, masked."""
        ended = []
        for s in self.store.overdue(time.time(), self.config.timeout_grace_s):
            outcome = self.store.fail(s.id, "no result within session_timeout_s", SessionState.TIMEOUT)
            if outcome.duplicate:
                continue
            ended.append(outcome.session)
            self._emit_session(outcome.session, "timeout")
            if outcome.task_finished:
                self._task_finished(s.task_id)
        return ended

    async def _reap_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.reap_interval_s)
            try:
                await asyncio.to_thread(self.reap_stale)
            except Exception:  # a reaper that dies silently would leave lost sessions forever
                log.exception("reaping stale nodes failed")


def serve(config: RolloutConfig) -> None:
    """`polar serve-rollout`: in the foreground until interrupted."""
    rollout = RolloutServer(config)
    try:
        print(f"polar rollout server on http://{config.host}:{config.port} (store {config.store.path})", flush=True)
        run(rollout.app, config.host, config.port)
    finally:
        rollout.store.close()


class RolloutThread(ServerThread):
    """A real rollout server on a thread of this process, for tests and `polar up`."""

    def __init__(self, config: RolloutConfig, store: RolloutStore | None = None):
        if config.port == 0:
            config = config.model_copy(update={"port": free_port(config.host)})
        self.server = RolloutServer(config, store)
        super().__init__(self.server.app, config.host, config.port, "polar-rollout")

    def __enter__(self) -> RolloutThread:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop(10)
        self.server.store.close()
