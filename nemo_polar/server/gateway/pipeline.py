"""The gateway node's staged pipeline: INIT -> READY -> RUN -> POST-RUN, each with its own workers.

Unlike the reference, an INIT worker never waits for a RUN slot: it puts the prepared session into
the READY buffer and takes the next one, so the warm buffer is bounded by `ready_target`, not by
the INIT pool. INIT admission is throttled so that `ready + init_inflight <= ready_target +
init_workers`. Every session whose INIT started goes through POST-RUN (the stage that recycles
its sandboxes), whatever happened: timeout, error, cancellation (by the rollout server: a task
cancelled, or its stragglers once early stop was reached there), shutdown.

Each session is a `Job[D]`: the pipeline's own bookkeeping plus `data`, the stages' state for it
(`Work` for a real harness). The stages (`Stages[D]`) supply `init`, `run`, `postrun` and
`prewarm_eval`, each given the job; `prewarm_eval` starts next to `run` and POST-RUN awaits it
before `postrun`.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from ...contracts import DispatchRequest, NodeMetrics, Timing
from ...states import SessionState

log = logging.getLogger(__name__)
S = SessionState
D = TypeVar("D")
Transition = Callable[[str, SessionState, str | None], None]


class Stages(Protocol[D]):
    async def init(self, job: Job[D]) -> None: ...
    async def run(self, job: Job[D]) -> None: ...
    async def prewarm_eval(self, job: Job[D]) -> None:
        """Started next to `run` (e.g. the evaluation's sandbox); it must never fail the session."""

    async def postrun(self, job: Job[D]) -> None: ...


@dataclass(eq=False)
class Job(Generic[D]):
    """One session as the pipeline sees it; `data` is the stages' own (runtime, partial results...)."""

    session_id: str
    data: D
    group: str = ""
    priority: int = 0
    session_timeout_s: float = math.inf
    agent_timeout_s: float = math.inf
    state: SessionState = S.REGISTERED
    outcome: SessionState | None = None  # set when the session leaves the happy path
    cause: str | None = None
    error: str | None = None
    timing: Timing = field(default_factory=Timing)
    prewarm: asyncio.Task[None] | None = None
    seq: int = 0
    t_submit: float = 0.0
    t_init: float = 0.0
    deadline: float = math.inf
    task: asyncio.Task[None] | None = None
    ready_timer: asyncio.TimerHandle | None = None  # ends it in READY when its session budget runs out
    cancel_cause: str | None = None
    started: bool = False  # INIT began: POST-RUN is owed
    future: asyncio.Future[Job[D]] | None = None
    report: Callable[[SessionState, str | None], None] = lambda state, cause=None: None

    @classmethod
    def from_dispatch(cls, req: DispatchRequest, data: D) -> Job[D]:
        t = req.task
        return cls(req.session_id, data, t.task_id or "", t.priority, t.session_timeout_s, t.agent_timeout_s)

    def remaining(self) -> float:
        return self.deadline - time.monotonic()


class _Ranked(Generic[D]):
    """Higher priority first, then arrival; removal is lazy (the heap keeps the dead entry)."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Job]] = []
        self._live: dict[int, Job] = {}

    def push(self, s: Job[D]) -> None:
        heapq.heappush(self._heap, (-s.priority, s.seq, s))  # seq is unique: a Job is never compared
        self._live[s.seq] = s

    def pop(self) -> Job:
        while True:
            _, seq, s = heapq.heappop(self._heap)
            if self._live.pop(seq, None) is not None:
                return s

    def remove(self, s: Job[D]) -> bool:
        return self._live.pop(s.seq, None) is not None

    def __len__(self) -> int:
        return len(self._live)


class Pipeline(Generic[D]):
    def __init__(
        self,
        init_workers: int,
        run_workers: int,
        postrun_workers: int,
        ready_target: int,
        stages: Stages[D],
        *,
        on_transition: Transition | None = None,
        postrun_grace_s: float = 60.0,
        stop_grace_s: float = 30.0,
    ) -> None:
        if min(init_workers, run_workers, postrun_workers) < 1 or ready_target < 0:
            raise ValueError("every pool needs a worker and ready_target >= 0")
        self.sizes = (init_workers, run_workers, postrun_workers)
        self.ready_target = ready_target
        self.stages = stages
        self.on_transition = on_transition
        self.postrun_grace_s = postrun_grace_s  # POST-RUN cleanup gets this even when the budget is spent
        self.stop_grace_s = stop_grace_s  # a cancelled stage gets this to stop before its session goes on
        self._init_q: _Ranked[D] = _Ranked()
        self._ready: _Ranked[D] = _Ranked()
        self._post_q: deque[Job[D]] = deque()
        self._inflight = {"init": 0, "run": 0, "postrun": 0}
        self._live: dict[str, Job[D]] = {}
        self._groups: dict[str, set[Job[D]]] = {}
        self._seq = itertools.count()
        self._wakers: set[asyncio.Future] = set()
        self._workers: list[asyncio.Task] = []
        self._paused = False

    # ---- public surface

    async def __aenter__(self) -> Pipeline[D]:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def start(self) -> None:
        n_init, n_run, n_post = self.sizes
        loops = [self._init_worker] * n_init + [self._run_worker] * n_run + [self._postrun_worker] * n_post
        self._workers = [asyncio.create_task(loop()) for loop in loops]

    async def close(self) -> None:
        """Cancel what is live, let its cleanup finish, then stop the workers."""
        for s in list(self._live.values()):
            self.cancel(s.session_id, "shutdown")
        await self.drain()
        for w in self._workers:
            w.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)

    def submit(self, s: Job[D]) -> asyncio.Future[Job[D]]:
        if s.session_id in self._live:
            raise ValueError(f"session {s.session_id} is already in the pipeline")
        s.seq, s.future = next(self._seq), asyncio.get_running_loop().create_future()
        s.report = lambda state, cause=None: self._emit(s, state, cause)
        s.t_submit = time.monotonic()
        self._live[s.session_id] = s
        self._groups.setdefault(s.group, set()).add(s)
        self._init_q.push(s)
        self._emit(s, S.REGISTERED, None)
        self._kick()
        return s.future

    def cancel(self, session_id: str, cause: str = "cancelled") -> bool:
        """Stop a session before POST-RUN; False when it is unknown or already cleaning up."""
        s = self._live.get(session_id)
        if s is None or s.cancel_cause or s.state not in (S.REGISTERED, S.INITIALIZING, S.READY, S.RUNNING):
            return False
        s.cancel_cause = cause
        if s.state is S.REGISTERED and self._init_q.remove(s):
            self._fail(s, S.CANCELLED, cause)
            self._finish(s, S.CANCELLED, cause)  # nothing was prepared: nothing to clean
        elif s.state is S.READY and self._ready.remove(s):
            s.ready_timer.cancel()
            self._fail(s, S.CANCELLED, cause)
            self._to_postrun(s)
        elif s.task is not None:
            s.task.cancel()  # the stage's worker sees it and sends the session to POST-RUN
        return True

    def cancel_group(self, group: str, cause: str = "cancelled") -> int:
        return sum(self.cancel(s.session_id, cause) for s in list(self._groups.get(group, ())))

    def pause(self) -> None:
        """Hold new RUN starts (weight update); running sessions go on."""
        self._paused = True

    def resume(self) -> None:
        self._paused = False
        self._kick()

    @property
    def paused(self) -> bool:
        return self._paused

    def metrics(self) -> NodeMetrics:
        return NodeMetrics(
            init_queue=len(self._init_q),
            init_inflight=self._inflight["init"],
            ready=len(self._ready),
            run_inflight=self._inflight["run"],
            postrun_queue=len(self._post_q),
            postrun_inflight=self._inflight["postrun"],
        )

    async def drain(self) -> None:
        """Wait until every submitted session is final."""
        await self._wait(lambda: not self._live)

    # ---- workers

    def _can_admit(self) -> bool:
        n_init = self.sizes[0]
        return len(self._init_q) > 0 and len(self._ready) + self._inflight["init"] < self.ready_target + n_init

    async def _init_worker(self) -> None:
        while True:
            await self._wait(self._can_admit)
            s = self._init_q.pop()
            s.started, s.t_init = True, time.monotonic()
            s.deadline = s.t_init + s.session_timeout_s
            s.timing.queued_s = s.t_init - s.t_submit
            self._inflight["init"] += 1
            try:
                ok = await self._stage(s, S.INITIALIZING, self.stages.init, s.remaining(), "session")
            finally:
                self._inflight["init"] -= 1
            s.timing.init_s = time.monotonic() - s.t_init
            if ok:
                self._ready.push(s)
                s.ready_timer = asyncio.get_running_loop().call_later(max(s.remaining(), 0), self._expire, s)
                self._emit(s, S.READY, None)
            else:
                self._to_postrun(s)
            self._kick()

    async def _run_worker(self) -> None:
        while True:
            await self._wait(lambda: not self._paused and len(self._ready) > 0)
            s = self._ready.pop()
            s.ready_timer.cancel()
            self._inflight["run"] += 1
            try:
                await self._run_one(s)
            finally:
                self._inflight["run"] -= 1
            self._to_postrun(s)
            self._kick()

    async def _run_one(self, s: Job[D]) -> None:
        s.timing.ready_wait_s = time.monotonic() - s.t_init - s.timing.init_s
        remaining = s.remaining()
        if s.cancel_cause:
            self._fail(s, S.CANCELLED, s.cancel_cause)
            return
        if remaining <= 0:  # its session budget ran out while it sat in READY
            self._fail(s, S.TIMEOUT, "timeout:session:ready")
            return
        s.prewarm = asyncio.create_task(self.stages.prewarm_eval(s))
        # the agent budget starts here: READY time never spends it
        source = "agent" if s.agent_timeout_s < remaining else "session"
        t0 = time.monotonic()
        await self._stage(s, S.RUNNING, self.stages.run, min(s.agent_timeout_s, remaining), source)
        s.timing.run_s = time.monotonic() - t0

    def _expire(self, s: Job[D]) -> None:
        """A prepared sandbox must not outlive its budget waiting for a RUN slot (all busy, or paused)."""
        if self._ready.remove(s):
            self._fail(s, S.TIMEOUT, "timeout:session:ready")
            self._to_postrun(s)

    async def _postrun_worker(self) -> None:
        while True:
            await self._wait(lambda: len(self._post_q) > 0)
            s = self._post_q.popleft()
            self._inflight["postrun"] += 1
            t0 = time.monotonic()
            try:
                await self._postrun_one(s)
            finally:
                self._inflight["postrun"] -= 1
            s.timing.postrun_s = time.monotonic() - t0
            self._finish(s, s.outcome or S.COMPLETED, s.cause)
            self._kick()

    async def _postrun_one(self, s: Job[D]) -> None:
        self._emit(s, S.POST_RUN, s.cause)
        if s.prewarm is not None:
            await self._settle_prewarm(s)
        task = asyncio.create_task(self.stages.postrun(s))
        done, _ = await asyncio.wait({task}, timeout=max(s.remaining(), self.postrun_grace_s))
        if not done:
            await self._stop(task, s, "POST-RUN")  # its own `finally` blocks still run: cleanup is not skipped
            self._fail(s, S.TIMEOUT, "timeout:session:postrun")
        elif not task.cancelled() and task.exception() is not None:
            log.warning("POST-RUN of %s failed", s.session_id, exc_info=task.exception())
            self._fail(s, S.ERROR, "error:postrun", task.exception())

    async def _settle_prewarm(self, s: Job[D]) -> None:
        """A failed session does not need its evaluation sandbox: stop it; otherwise wait within budget."""
        if s.outcome is not None:
            s.prewarm.cancel()
        done, _ = await asyncio.wait({s.prewarm}, timeout=max(s.remaining(), 0))
        if not done:
            await self._stop(s.prewarm, s, "the evaluation's prewarm")
            self._fail(s, S.TIMEOUT, "timeout:session:prewarm")
        elif not s.prewarm.cancelled() and s.prewarm.exception() is not None:
            self._fail(s, S.ERROR, "error:prewarm", s.prewarm.exception())

    async def _stage(
        self, s: Job[D], state: SessionState, fn: Callable[[Job[D]], Awaitable[None]], timeout: float, source: str
    ) -> bool:
        """Run one cancellable, bounded stage as its own task; False sends the session to POST-RUN."""
        if s.cancel_cause:
            self._fail(s, S.CANCELLED, s.cancel_cause)
            return False
        s.task = asyncio.create_task(fn(s))
        self._emit(s, state, None)
        try:
            done, _ = await asyncio.wait({s.task}, timeout=max(timeout, 0))
            if not done:
                await self._stop(s.task, s, state.value)
        except asyncio.CancelledError:  # the worker itself is being stopped
            s.task.cancel()
            raise
        task, s.task = s.task, None
        if s.cancel_cause:  # checked first: a stage may swallow its CancelledError
            self._fail(s, S.CANCELLED, s.cancel_cause)
        elif not done:
            self._fail(s, S.TIMEOUT, f"timeout:{source}:{state.value}")
        elif task.cancelled():
            self._fail(s, S.CANCELLED, f"cancelled:{state.value}")
        elif task.exception() is not None:
            self._fail(s, S.ERROR, f"error:{state.value}", task.exception())
        return s.outcome is None

    async def _stop(self, task: asyncio.Task[None], s: Job[D], what: str) -> None:
        """Cancel a stage past its budget and let it clean up; one that is still going after `stop_grace_s`
        (a bug: it swallowed the cancellation, or its cleanup hangs) is left behind, so the session's
        deadline holds: it goes on to POST-RUN, and to its result."""
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=self.stop_grace_s)
        if not done:
            log.error(
                "%s of %s still runs %.0f s after it was stopped: left behind", what, s.session_id, self.stop_grace_s
            )

    # ---- bookkeeping

    def _fail(self, s: Job[D], outcome: SessionState, cause: str, exc: BaseException | None = None) -> None:
        if s.outcome is None:  # the first failure is the one that counts
            s.outcome, s.cause = outcome, cause
            s.error = f"{type(exc).__name__}: {exc}" if exc else None

    def _to_postrun(self, s: Job[D]) -> None:
        if not s.started:
            self._finish(s, s.outcome or S.CANCELLED, s.cause)
            return
        self._post_q.append(s)
        self._kick()

    def _finish(self, s: Job[D], final: SessionState, cause: str | None) -> None:
        s.state = final
        self._live.pop(s.session_id, None)
        group = self._groups.get(s.group)
        if group is not None:
            group.discard(s)
            if not group:  # a finished group's entry goes with its last session: a node runs groups for days
                del self._groups[s.group]
        self._emit(s, final, cause)
        if s.future is not None and not s.future.done():
            s.future.set_result(s)
        self._kick()

    def _emit(self, s: Job[D], state: SessionState, cause: str | None) -> None:
        s.state = state
        if self.on_transition is None:
            return
        try:
            self.on_transition(s.session_id, state, cause)
        except Exception:  # a broken observer must not wedge the pipeline
            log.exception("transition callback failed for %s", s.session_id)

    def _kick(self) -> None:
        for w in self._wakers:
            if not w.done():
                w.set_result(None)
        self._wakers.clear()

    async def _wait(self, ready: Callable[[], bool]) -> None:
        while not ready():
            w = asyncio.get_running_loop().create_future()
            self._wakers.add(w)
            try:
                await w
            finally:
                self._wakers.discard(w)
