"""What a gateway node does in each stage of a session, for a real harness in a real sandbox.

INIT: a sandbox (working copy + HOME), its `prepare` steps, and a proxy session whose key is the
harness's API key.
RUN: the harness, unchanged, inside the sandbox, bounded by the agent budget.
POST-RUN: the proxy session is closed (its key refused from then on), every process the agent left is
killed (`Runtime.quiesce`) and what it changed outside its working copy noted, its records become traces,
the evaluator gives the reward (for a session in an image: in a fresh sandbox of the same image, started
next to RUN with its `eval_prepare` steps), the sandboxes go. Whatever happened, POST-RUN produces a
`SessionResult`; `on_result` delivers it. A POST-RUN that raises or runs out of time delivers none: the node
sends `undelivered` instead.

A session's state between the stages is its `Work` (the pipeline job's `data`): typed fields,
among them the one link from the rollout session to its proxy session (`proxy_session`).

The node's event loop also serves the harnesses' model calls, so every stage step that touches the
disk (folders, the proxy's session rows, traces, logs) runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from ...contracts import DispatchRequest, FailureKind, SessionResult
from ...errors import HarnessNotInstalled, SandboxError
from ...evaluators import EVALUATORS, EvalContext, Evaluation
from ...harnesses import HARNESSES, Endpoint
from ...harnesses.install import check_install
from ...harnesses.logs import keep_logs
from ...records import Session as ProxySession
from ...rollup import rollup
from ...runtimes import TIMEOUT_RC, Runtime
from ...runtimes.fresh import FreshSandbox
from ...runtimes.steps import run_steps
from ...states import SessionState
from ...traces import build
from ...traces.export import with_messages, write_jsonl
from .pipeline import Job
from .proxy_surface import ProxySurface

log = logging.getLogger(__name__)
EVAL_MIN_S = 60.0  # the evaluation's floor when the session budget is (nearly) spent
BUDGET_POLL_S = 0.25  # how often a running agent's session is checked for a spent budget
BUDGET_GRACE_S = 5.0  # how long a harness refused for its budget may take to stop by itself
STREAM_TAIL = 20_000  # characters of the harness's stdout and stderr kept in the node's memory


@dataclass
class Work:
    """The stages' own state for one session (the pipeline job's `data`)."""

    request: DispatchRequest
    runtime: Runtime | None = None
    proxy_session: ProxySession | None = None  # opened in INIT: its key is the harness's API key
    harness_version: str | None = None
    exit_code: int | None = None
    agent_timed_out: bool = False
    stdout_tail: str = ""
    stderr_tail: str = ""
    logs: str | None = None  # the session's harness logs, kept outside the sandbox
    evaluation_s: float | None = None
    eval_ctx: EvalContext | None = None
    prepare: list[dict] | None = None  # the `prepare` steps' reports
    fresh: FreshSandbox | None = None  # where a session that ran in an image is graded
    agent_left: list[str] | None = None  # what still ran once the agent ended, killed before grading
    changed_outside: list[str] | None = None  # paths the session changed outside its working copy
    infra_error: str | None = None  # set when the session failed for the node's sake: masked
    budget_spent: str | None = None  # why the proxy refused the session's calls for its budget
    limit_exceeded: str | None = None  # the limit of the node's (runtime.limits) that ended the session


class HarnessStages:
    def __init__(
        self,
        proxy: ProxySurface,
        proxy_url: str,
        root: Path,
        node_id: str,
        on_result: Callable[[SessionResult], Awaitable[None]],
    ):
        self.proxy, self.proxy_url, self.root, self.node_id = proxy, proxy_url, Path(root), node_id
        self.on_result = on_result

    def job(self, request: DispatchRequest) -> Job[Work]:
        return Job.from_dispatch(request, Work(request))

    async def init(self, job: Job[Work]) -> None:
        work, task = job.data, job.data.request.task
        work.runtime = task.runtime.make(self.root, job.session_id, self.proxy_url)
        await work.runtime.start()
        try:
            work.prepare = await run_steps(work.runtime, task.runtime.prepare)
        except SandboxError as exc:
            work.infra_error = str(exc)
            raise
        work.proxy_session = await asyncio.to_thread(
            self.proxy.open_session,
            metadata={"rollout_session": job.session_id, "task_id": task.task_id, "sample": work.request.sample_index},
            upstream_url=task.upstream_url,
            upstream_model=task.upstream_model,
            max_tokens=task.max_output_tokens,
            max_calls=task.call_budget,
            max_sampled=task.budget.tokens,
        )

    async def run(self, job: Job[Work]) -> None:
        work = job.data
        task, runtime, opened = work.request.task, work.runtime, work.proxy_session
        assert runtime is not None and opened is not None
        try:  # anything that fails here is the node's doing, not the agent's: masked, never scored 0
            harness = HARNESSES.make(task.harness.name, task.harness.options)
            work.harness_version = await asyncio.to_thread(check_install, harness)
            launch = harness.launch(
                task.instruction,
                Endpoint(runtime.proxy_url or self.proxy_url, opened.api_key),
                runtime.inside(),  # paths as the harness sees them; its files are written on the host side
                task.harness.max_steps,
            )
            launch.write_files(runtime.home)
            if unseen := runtime.unseen(launch.argv):
                log.warning(
                    "%s: %s is not in the sandbox (runtime.volumes binds it)", job.session_id, ", ".join(unseen)
                )
            agent = asyncio.ensure_future(runtime.exec(launch.argv, launch.env, timeout=job.agent_timeout_s))
            work.budget_spent = await self._watch_budget(agent, opened.id)
            rc, out, err = (await agent) if not agent.cancelled() else (None, "", "(stopped: its budget was spent)")
        except Exception as exc:
            work.infra_error = str(exc) if isinstance(exc, HarnessNotInstalled) else f"{type(exc).__name__}: {exc}"
            raise
        work.limit_exceeded = runtime.exceeded()
        secrets = task.secrets  # what the harness printed of its environment is kept without it
        out, err = secrets.scrub(out), secrets.scrub(err)
        work.exit_code, work.agent_timed_out = rc, rc == TIMEOUT_RC and work.budget_spent is None
        work.stdout_tail, work.stderr_tail = out[-STREAM_TAIL:], err[-STREAM_TAIL:]
        folder = self.root / "logs" / job.session_id
        work.logs = str(await asyncio.to_thread(keep_logs, folder, out, err, runtime.home, harness.log_files))

    async def _watch_budget(self, agent: asyncio.Future, session_id: str) -> str | None:
        """While the agent runs: once the proxy refuses its calls for the session's budget, the harness gets
        `BUDGET_GRACE_S` to stop by itself (a terminal 400 ends most), then is stopped. Why, or None."""
        try:
            while not agent.done():
                why = self.proxy.budget_spent(session_id)
                if why is not None:
                    done, _ = await asyncio.wait([agent], timeout=BUDGET_GRACE_S)
                    if not done:
                        agent.cancel()  # its process group is killed (a container's goes at stop)
                        await asyncio.gather(agent, return_exceptions=True)
                    return why
                await asyncio.wait([agent], timeout=BUDGET_POLL_S)
        except BaseException:
            agent.cancel()
            raise
        return self.proxy.budget_spent(session_id)

    async def prewarm_eval(self, job: Job[Work]) -> None:
        """Started next to RUN: the evaluator prepares its copy of the repo while the agent works.
        Never fails the session: `evaluate` redoes whatever prewarm did not finish."""
        work = job.data
        if work.runtime is None:
            return
        try:
            spec = work.request.task.evaluator
            await EVALUATORS.make(spec.kind, spec.config).prewarm(self._eval_ctx(job))
        except Exception:
            log.warning("evaluation prewarm failed for %s", job.session_id, exc_info=True)

    async def postrun(self, job: Job[Work]) -> None:
        work = job.data
        if work.proxy_session is not None:  # nothing may call the model for this session any more
            await asyncio.to_thread(self.proxy.close_session, work.proxy_session.id)
        t0 = time.monotonic()
        try:
            evaluation = await self._evaluate(job)
            work.evaluation_s = round(time.monotonic() - t0, 3)
            # building traces is CPU work: off the event loop, which must keep the node's heartbeats going
            result = await asyncio.to_thread(self._result, job, evaluation)
            result.timing.postrun_s = time.monotonic() - t0  # the pipeline's own clock stops after delivery
        finally:
            if work.runtime is not None:
                await work.runtime.stop()
            if work.fresh is not None:
                await work.fresh.stop()
            if work.eval_ctx is not None:
                await asyncio.to_thread(shutil.rmtree, work.eval_ctx.scratch, True)
        await self.on_result(result)

    def _eval_ctx(self, job: Job[Work]) -> EvalContext:
        work = job.data
        if work.eval_ctx is None:
            task, runtime = work.request.task, work.runtime
            assert runtime is not None
            work.eval_ctx = EvalContext(
                fields=task.fields,
                config=task.evaluator.config,
                work=runtime.work,
                scratch=self.root / "eval" / job.session_id,
                repo=Path(task.runtime.repo) if task.runtime.repo else None,
                home=runtime.home,
            )
            if runtime.in_image:  # the working copy and the tests' environment are the image's
                work.fresh = fresh = FreshSandbox(task.runtime, self.root, f"{job.session_id}-eval", self.proxy_url)
                work.eval_ctx.sandbox, work.eval_ctx.fresh = runtime, fresh.get
                work.eval_ctx.fresh_work = lambda: fresh.with_work(runtime)
        return work.eval_ctx

    async def _evaluate(self, job: Job[Work]) -> Evaluation | None:
        """None when the agent never ran (masked); a bad task or a failing evaluator is masked too."""
        work = job.data
        if work.runtime is None or work.proxy_session is None:
            return None
        if work.infra_error is not None:
            return Evaluation.infra(work.infra_error)
        if work.budget_spent is not None and work.request.task.budget.on_spent == "mask":
            return Evaluation.infra(work.budget_spent)
        if work.limit_exceeded is not None and work.request.task.runtime.limits.on_exceeded == "mask":
            return Evaluation.infra(work.limit_exceeded)
        status = job.outcome or SessionState.COMPLETED
        if status is SessionState.CANCELLED:  # early stop or shutdown: not graded, and never a 0 in training
            return Evaluation.infra(f"not graded: {job.cause or 'cancelled'}")
        ctx = self._eval_ctx(job)
        ctx.status, ctx.exit_code = status, work.exit_code
        ctx.timeout_s = max(job.remaining(), EVAL_MIN_S)
        spec = work.request.task.evaluator
        try:  # nothing of the agent may run on while its work is graded, whatever its harness did
            work.agent_left = await work.runtime.quiesce()
            ctx.changed_outside = work.changed_outside = await work.runtime.changed_outside()
        except Exception as exc:
            log.warning("ending what the agent left failed for %s", job.session_id, exc_info=True)
            return Evaluation.infra(f"the agent's processes could not be ended: {type(exc).__name__}: {exc}")
        try:
            return await EVALUATORS.make(spec.kind, spec.config).evaluate(ctx)
        except Exception as exc:
            log.warning("evaluation failed for %s", job.session_id, exc_info=True)
            return Evaluation.infra(f"{type(exc).__name__}: {exc}")

    def undelivered(self, job: Job[Work]) -> SessionResult:
        """The result of a session whose POST-RUN delivered none (it raised, or ran out of time): masked, with why."""
        why = f"{job.cause} ({job.error})" if job.error else job.cause
        return SessionResult(
            session_id=job.session_id,
            task_id=job.data.request.task.task_id or "",
            status=job.outcome or SessionState.ERROR,
            masked=True,
            proxy_session_id=job.data.proxy_session.id if job.data.proxy_session is not None else None,
            timing=job.timing.model_copy(),
            node_id=self.node_id,
            error=f"no result from POST-RUN: {why or 'it ended without one'}",
            failure_kind=failure_kind(job.outcome or SessionState.ERROR, FailureKind.AGENT_RUN_ERROR),
        )

    def _result(self, job: Job[Work], evaluation: Evaluation | None) -> SessionResult:
        work = job.data
        task, opened = work.request.task, work.proxy_session
        stats, traces_path, summed = {}, None, None
        if opened is not None:
            records = self.proxy.records(opened.id)
            built = build(records, task.builder)
            with_messages(built.traces, records)  # each call's text travels with its trace
            HARNESSES[task.harness.name].name_side_calls(built.traces, {r.id: r.native_request for r in records})
            traces_path = str(self.root / "traces" / f"{job.session_id}.jsonl")
            Path(traces_path).parent.mkdir(parents=True, exist_ok=True)
            write_jsonl(built, traces_path, session_id=job.session_id)
            stats = built.stats.model_dump()
            summed = rollup(records, built.stats.trained_tokens).model_dump()
        status = job.outcome or SessionState.COMPLETED
        failure = "the agent never ran" if evaluation is None else evaluation.infrastructure_error
        evaluated = {} if evaluation is None else {"evaluator": task.evaluator.kind, **evaluation.model_dump()}
        ran_out = failure is not None and failure in (work.budget_spent, work.limit_exceeded)
        failed = FailureKind.AGENT_RUN_ERROR if evaluation is None or ran_out else FailureKind.VERIFIER_ERROR
        return SessionResult(
            session_id=job.session_id,
            task_id=task.task_id or "",
            status=status,
            reward=None if failure else evaluation.reward,
            reward_components={} if failure else evaluation.components,
            masked=failure is not None,
            traces_path=traces_path,
            proxy_session_id=opened.id if opened is not None else None,
            stats=stats
            | {"exit_code": work.exit_code, "agent_timed_out": work.agent_timed_out, "finished_at": time.time()}
            | {"logs": work.logs, "harness_version": work.harness_version, "evaluation_s": work.evaluation_s}
            | ({"budget_spent": work.budget_spent} if work.budget_spent else {})
            | ({"limit_exceeded": work.limit_exceeded} if work.limit_exceeded else {})
            | ({"limits_held_by": work.runtime.containment.how} if work.runtime and work.runtime.containment else {})
            | ({"agent_left": work.agent_left} if work.agent_left else {})
            | ({"changed_outside_workdir": work.changed_outside} if work.changed_outside else {})
            | ({"prepare": work.prepare} if work.prepare else {})
            | ({"evaluation": evaluated} if evaluated else {}),
            rollup=summed,
            timing=job.timing.model_copy(),
            node_id=self.node_id,
            error=job.error
            or job.cause
            or (failure if ran_out else None)
            or (f"evaluation: {failure}" if evaluation and failure else None),
            failure_kind=failure_kind(status, failed if failure else None),
        )


def failure_kind(status: SessionState, failed: FailureKind | None) -> FailureKind | None:
    """What a node's result says failed: by its state when it did not complete (timed out, cancelled, else the
    agent's run), else `failed` (what POST-RUN found: None when the session was judged)."""
    if status is SessionState.TIMEOUT:
        return FailureKind.AGENT_TIMEOUT
    if status is SessionState.CANCELLED:
        return FailureKind.CANCELLED
    return failed if status is SessionState.COMPLETED else FailureKind.AGENT_RUN_ERROR
