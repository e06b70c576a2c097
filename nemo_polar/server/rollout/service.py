"""The rollout server's domain: tasks become sessions, sessions go to nodes, results come back.

`RolloutService` is what the routes (`app.py`) call. It owns the store, the dispatch reservations,
the state-change events and the background work (dispatching, reaping lost nodes and overdue
sessions, stopping sessions on their nodes, posting task results to callback URLs).

Two rules keep it safe:

- The store is synchronous SQLite with a commit per write (an acknowledged result survives
  `kill -9`). It is never touched on the event loop: every async verb runs its domain step, store
  calls and all, in a worker thread (`_off_loop`). The steps are the plain methods below, which is
  also how the dispatcher and the reaper call them.
- Shared in-memory state has one owner: the reservations their own lock (`Reservations`),
  planning a dispatch batch the service's `_plan_lock`; events go through a thread-safe broadcaster,
  and network work started from a worker thread is handed to the loop (`_spawn`).

Early stop lives here and only here: the server sees every session of a task, and of a GRPO group
spread over one-sample tasks, wherever they run; it cancels the stragglers and tells their nodes.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from contextlib import suppress
from pathlib import Path
from typing import Any, ParamSpec, TypeVar
from urllib.parse import quote

from pydantic import BaseModel, Field, model_validator

from ...config import Strict
from ...contracts import DispatchRequest, FailureKind, NodeMetrics, NodeRegistration, SessionResult, TaskSpec
from ...control import LOOPBACK
from ...errors import Forbidden, IllegalMove, NotFound, RequestInvalid
from ...evaluators import grader_touches
from ...metrics import RolloutMetrics
from ...redaction import Secrets, hide
from ...states import SessionState
from ..client import NodeAPI, NodeTarget
from . import scheduler
from .dispatcher import Dispatch, dispatch_loop
from .events import Broadcaster
from .store import NodeRow, Outcome, RolloutStore, SessionRow, TaskRow

log = logging.getLogger("nemo_polar.rollout")
P = ParamSpec("P")
R = TypeVar("R")


class RolloutStoreConfig(Strict):
    path: str = Field(
        "runs/rollout/rollout.sqlite", description="the SQLite file of every task, session and result (WAL; kept)"
    )


class ControlLimits(Strict):
    """What one request to the rollout server may carry."""

    max_body_bytes: int = Field(16 * 2**20, gt=0, description="a larger request body is refused with a 413")
    max_depth: int = Field(64, gt=0, description="how deep the JSON of a task may nest")


class RolloutConfig(Strict):
    host: str = Field("127.0.0.1", description="the address to listen on (0.0.0.0: reachable from other machines)")
    port: int = Field(8900, ge=0, le=65535, description="the port to listen on (0: any free one)")
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
    allow_unsandboxed: bool = Field(
        False, description="accept tasks that run outside a sandbox (runtime.sandbox false) or with network: host"
    )
    limits: ControlLimits = ControlLimits()
    store: RolloutStoreConfig = RolloutStoreConfig()

    @model_validator(mode="after")
    def _no_open_listening(self) -> RolloutConfig:
        if self.control_token is None and self.host not in LOOPBACK:
            raise ValueError(
                f"host={self.host}: listening beyond loopback needs a control_token (or POLAR_CONTROL_TOKEN): "
                "anyone who reaches the port could submit tasks"
            )
        return self


class StateReport(BaseModel):
    """A node's progress report for one session (initializing, ready, running, ...)."""

    session_id: str
    state: SessionState
    node_id: str | None = None


class Heartbeat(BaseModel):
    metrics: NodeMetrics = NodeMetrics()


class Reservations:
    """Sessions dispatched to each node since its last heartbeat, which its metrics do not show yet."""

    def __init__(self) -> None:
        self._count: dict[str, int] = {}
        self._lock = threading.Lock()

    def __getitem__(self, node_id: str) -> int:
        with self._lock:
            return self._count.get(node_id, 0)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._count)

    def take(self, node_id: str) -> None:
        with self._lock:
            self._count[node_id] = self._count.get(node_id, 0) + 1

    def release(self, node_id: str) -> None:
        with self._lock:
            if self._count.get(node_id, 0) > 0:
                self._count[node_id] -= 1

    def reset(self, node_id: str) -> None:
        """A heartbeat: its metrics now count what we dispatched before."""
        with self._lock:
            self._count[node_id] = 0


class RolloutService:
    def __init__(self, config: RolloutConfig, store: RolloutStore | None = None):
        self.config = config
        self.store = store or RolloutStore(config.store.path)
        self.events = Broadcaster()
        self.reservations = Reservations()
        self.metrics = RolloutMetrics(self.store, self._nodes_alive)
        self._plan_lock = threading.Lock()  # one dispatch batch is planned at a time
        self._loop: asyncio.AbstractEventLoop | None = None  # set while serving; network work runs on it
        self._background: set[asyncio.Future[Any]] = set()
        self._tasks: list[asyncio.Task[None]] = []
        self.nodes_api: NodeAPI | None = None
        alive = self._alive_at_start if config.keep_live_nodes_on_restart else _nobody
        self.recovered = self.store.recover(alive)

    @property
    def public_url(self) -> str:
        return self.config.public_url or f"http://{self.config.host}:{self.config.port}"

    # --- lifecycle --------------------------------------------------------------------------
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.nodes_api = NodeAPI()
        self._tasks = [asyncio.create_task(self._reap_loop())]
        if self.config.dispatch:
            self._tasks.append(asyncio.create_task(dispatch_loop(self, self.nodes_api)))

    async def stop(self) -> None:
        self._loop = None
        for t in self._tasks:
            t.cancel()
        for fut in list(self._background):
            fut.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.nodes_api is not None:
            await self.nodes_api.close()

    async def _off_loop(self, step: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """The one rule: a domain step (it touches the store) runs in a worker thread, never on the loop."""
        return await asyncio.to_thread(step, *args, **kwargs)

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Network work from any thread, on the serving loop; dropped (and closed) when not serving."""
        loop = self._loop
        if loop is None:
            coro.close()
            return
        fut = asyncio.run_coroutine_threadsafe(coro, loop)
        self._background.add(fut)
        fut.add_done_callback(self._background.discard)

    def _emit(self, kind: str, **fields: Any) -> None:
        self.events.publish({"event": kind, "at": time.time(), **fields})

    def _emit_session(self, s: SessionRow, cause: str) -> None:
        self._emit("session", session_id=s.id, task_id=s.task_id, state=s.state.value, node_id=s.node_id, cause=cause)

    # --- the verbs the routes call ------------------------------------------------------------
    def _nodes_alive(self) -> dict[str, bool]:
        now = time.time()
        return {n.id: scheduler.healthy(n, now) for n in self.store.nodes()}

    async def health(self) -> dict[str, Any]:
        nodes = await self._off_loop(self.store.nodes)
        now = time.time()
        return {"status": "ok", "nodes": len(nodes), "healthy_nodes": sum(scheduler.healthy(n, now) for n in nodes)}

    async def submit(self, spec: TaskSpec) -> tuple[TaskRow, list[SessionRow]]:
        return await self._off_loop(self._submit, spec)

    async def tasks(self, status: str | None) -> list[dict[str, Any]]:
        return await self._off_loop(self._tasks_view, status)

    async def task(self, task_id: str) -> dict[str, Any]:
        return await self._off_loop(self.task_result, task_id)

    async def cancel(self, task_id: str) -> list[SessionRow]:
        return await self._off_loop(self._cancel, task_id)

    async def register(self, registration: NodeRegistration) -> NodeRow:
        return await self._off_loop(self._register, registration)

    async def nodes(self) -> list[dict[str, Any]]:
        return await self._off_loop(self._nodes_view)

    async def heartbeat(self, node_id: str, metrics: NodeMetrics) -> NodeRow:
        return await self._off_loop(self._heartbeat, node_id, metrics)

    async def drain(self, node_id: str) -> NodeRow:
        return await self._off_loop(self._drain, node_id)

    async def record_result(self, result: SessionResult) -> Outcome:
        return await self._off_loop(self._record_result, result)

    async def report_state(self, report: StateReport) -> tuple[SessionRow, bool]:
        """The session after the report, and whether the report was stale (answered, changed nothing)."""
        return await self._off_loop(self._report_state, report)

    async def inference(
        self, action: str, timeout_s: float, policy_version: str | None
    ) -> tuple[bool, dict[str, dict[str, Any]]]:
        """Weight update: pause (or resume) generation on every live node; whether every one of them
        answered 2xx (for a pause: drained), and their answers by node id."""
        assert self.nodes_api is not None, "not serving"
        nodes = await self._off_loop(self.store.nodes)
        now = time.time()
        path = f"/admin/inference/{action}?timeout_seconds={timeout_s}"
        if action == "resume" and policy_version is not None:  # the weights the nodes now serve
            path += "&policy_version=" + quote(policy_version)
        targets = [(NodeTarget.of(n.registration), path) for n in nodes if scheduler.alive(n, now)]
        answers = await self.nodes_api.fan_out("POST", targets, timeout_s + 10)
        ok = all(a.get("status") is not None and a["status"] < 300 for a in answers.values())
        self._emit("inference", action=action, ok=ok)
        return ok, answers

    # --- domain steps (worker threads; the dispatcher and the reaper call them too) -----------
    def _submit(self, spec: TaskSpec) -> tuple[TaskRow, list[SessionRow]]:
        if not self.config.allow_unsandboxed and (not spec.runtime.sandboxed or spec.runtime.network == "host"):
            raise Forbidden(
                "runtime.sandbox false and runtime.network host are refused by this rollout server "
                "(set allow_unsandboxed: true in its configuration to allow them)"
            )
        if spec.runtime.repo is not None and not Path(spec.runtime.repo).is_dir():
            # the nodes copy it from a filesystem they share with this server (a cluster's)
            raise RequestInvalid(f"runtime.repo: no folder {spec.runtime.repo!r} on the rollout server's machine")
        task, sessions = self.store.submit(spec)
        hide(spec.secrets.values)  # this process's log lines never show them
        self._emit("task", task_id=task.id, status=task.status)
        return task, sessions

    def _tasks_view(self, status: str | None) -> list[dict[str, Any]]:
        return [
            t.as_json() | {"counts": self.store.counts(t.id), "rollup": self.store.rollup_totals(t.id)}
            for t in self.store.tasks(status)
        ]

    def task_result(self, task_id: str) -> dict[str, Any]:
        """The task, its sessions with states and results, counts by state: also the callback's body. Its
        secrets are masked (`redaction.Secrets`): in the spec, and wherever a result's text repeats one."""
        task = self.store.task(task_id)
        spec = task.spec.model_dump(mode="json")
        secrets = Secrets.of(spec)
        return task.as_json() | {
            "spec": secrets.spec(spec),
            "counts": self.store.counts(task_id),
            "sessions": secrets.scrub([s.as_json() for s in self.store.sessions(task_id)]),
        }

    def _cancel(self, task_id: str) -> list[SessionRow]:
        # the trainer asked for this, so no callback is posted; a finished task is left as it is
        moved = self.store.cancel(task_id)
        for s in moved:
            self._emit_session(s, "task cancelled")
        self._stop_on_nodes(moved)
        self._emit("task", task_id=task_id, status=self.store.task(task_id).status)
        return moved

    def _register(self, registration: NodeRegistration) -> NodeRow:
        # A node registers when its process starts: whatever we still think runs there is lost.
        self._lose_sessions(registration.node_id, "node restarted")
        node = self.store.register_node(registration)
        self.reservations.reset(node.id)
        self._emit("node", node_id=node.id, status="registered")
        return node

    def _nodes_view(self) -> list[dict[str, Any]]:
        now = time.time()
        return [
            n.as_json() | {"healthy": scheduler.healthy(n, now), "reserved": self.reservations[n.id]}
            for n in self.store.nodes()
        ]

    def _heartbeat(self, node_id: str, metrics: NodeMetrics) -> NodeRow:
        node = self.store.heartbeat(node_id, metrics)
        self.reservations.reset(node.id)
        return node

    def _drain(self, node_id: str) -> NodeRow:
        node = self.store.drain(node_id)
        self._emit("node", node_id=node.id, status="draining")
        return node

    def _record_result(self, result: SessionResult) -> Outcome:
        outcome = self.store.record_result(result)
        if outcome.duplicate:
            return outcome
        self._emit_session(outcome.session, "result")
        for kind in grader_touches(((result.stats or {}).get("evaluation") or {}).get("details") or {}):
            self.metrics.grader_touched.labels(kind).inc()
        if outcome.task_finished:
            self._task_finished(result.task_id)
        self._early_stop(result.task_id)
        return outcome

    def _report_state(self, report: StateReport) -> tuple[SessionRow, bool]:
        cause = f"reported by {report.node_id or 'node'}"
        try:
            s = self.store.move(report.session_id, report.state, cause, report.node_id)
        except IllegalMove:
            # reports cross on the network: one that does not move the session forward is stale, not wrong
            s = self.store.session(report.session_id)
            if s.node_id is not None and report.node_id is not None and s.node_id != report.node_id:
                raise
            return s, True
        self._emit_session(s, "reported")
        return s, False

    def _early_stop(self, task_id: str) -> None:
        """Once `early_stop_k` sessions of the task completed, or of its GRPO group when its samples came
        as one task each, the stragglers are cancelled (masked, never scored 0) here and on their nodes."""
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
        """Cancelled here, so their nodes stop them too and free their slots (late results are ignored)."""
        nodes = {n.id: NodeTarget.of(n.registration) for n in self.store.nodes()}
        targets = [(nodes[s.node_id], s.id) for s in sessions if s.node_id in nodes]
        if targets and self.nodes_api is not None:
            self._spawn(self.nodes_api.stop(targets))

    def _task_finished(self, task_id: str) -> None:
        """Called once per task, by whoever made its last session final."""
        task = self.store.task(task_id)
        self._emit("task", task_id=task_id, status=task.status)
        url = task.spec.callback_url
        if url and (self._loop is None or self.nodes_api is None):
            log.warning("task %s finished while not serving: its callback is not posted (poll GET /tasks)", task_id)
        elif url and self.nodes_api is not None:
            self._spawn(self.nodes_api.post_callback(url, self.task_result(task_id), self.config.callback_timeout_s))

    # --- dispatch (the dispatcher's steps) ------------------------------------------------------
    def next_dispatch(self) -> Dispatch | None:
        """The highest-priority waiting session and the node to run it, marked dispatched; None if none fits."""
        batch = self.next_dispatches(1)
        return batch[0] if batch else None

    def next_dispatches(self, limit: int) -> list[Dispatch]:
        """Up to `limit` waiting sessions, each placed on the least loaded node as the batch fills them.
        Stale nodes get none (`scheduler.pick`); their sessions are the reaper's (`reap_stale`)."""
        with self._plan_lock:
            waiting = self.store.waiting(limit)
            nodes, now, plan = self.store.nodes(), time.time(), []
            planned = self.reservations.snapshot()
            for session in waiting:
                node = scheduler.pick(nodes, planned, now)
                if node is None:
                    break
                planned[node.id] = planned.get(node.id, 0) + 1
                plan.append((session.id, node))
                self.metrics.dispatch_latency.observe(max(now - session.updated_at, 0.0))
            if not plan:
                return []
            rows = self.store.mark_dispatched_many([(sid, node.id) for sid, node in plan])
            for _, node in plan:
                self.reservations.take(node.id)
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
        """The POST to the node failed: back in the queue, its reservation released. One its node reported
        since (the node took it, its answer was lost) is left to the node: its result comes as any other."""
        s = self.store.session(session_id)
        if s.node_id:
            self.reservations.release(s.node_id)
        if s.state is not SessionState.REGISTERED:
            return s
        with suppress(IllegalMove):  # reported between our look and the re-queue: the node has it
            return self.store.requeue(session_id, cause)
        return self.store.session(session_id)

    # --- lost nodes and overdue sessions (the reaper's steps) -----------------------------------
    def _alive_at_start(self, node_id: str) -> bool:
        """Alive when we went down (its heartbeats could not reach us since). It gets a fresh
        heartbeat window now: if it does not call again, the reaper ends its sessions as lost."""
        try:
            node = self.store.node(node_id)
        except NotFound:
            return False
        if not scheduler.alive(node, self.store.last_activity()):
            return False
        self.store.heartbeat(node.id, node.metrics)
        return True

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
            why = f"no result within session_timeout_s (its node last reported it {s.state.value})"
            outcome = self.store.fail(s.id, why, SessionState.TIMEOUT, FailureKind.AGENT_TIMEOUT)
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
                await self._off_loop(self.reap_stale)
            except Exception:  # a reaper that dies silently would leave lost sessions forever
                log.exception("reaping stale nodes failed")


def _nobody(node_id: str) -> bool:
    return False


__all__ = ["Heartbeat", "Reservations", "RolloutConfig", "RolloutService", "RolloutStoreConfig", "StateReport"]
