"""What a gateway node does in each stage of a session, for a real harness in a real sandbox.

INIT: a sandbox (working copy + HOME) and a proxy session whose key is the harness's API key.
RUN: the harness, unchanged, inside the sandbox, bounded by the agent budget.
POST-RUN: the session's records become traces, the evaluator gives the reward, the sandbox goes.
Whatever happened, POST-RUN produces a `SessionResult`; `on_result` delivers it.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...evaluators import EvalContext, Evaluation, make_evaluator
from ...proxy.app import Proxy
from ...traces import build
from ...traces.export import write_jsonl
from ..contracts import DispatchRequest, SessionResult, SessionState
from .harnesses import HARNESSES, Endpoint, Harness
from .harnesses.install import HarnessNotInstalled, check_install
from .harnesses.logs import keep_logs
from .harnesses.pi import Pi
from .harnesses.shell import Shell
from .pipeline import Session
from .runtimes import TIMEOUT_RC, Runtime, make_runtime

log = logging.getLogger(__name__)
EVAL_MIN_S = 60.0  # the evaluation's floor when the session budget is (nearly) spent


def harness_for(name: str, dialect: str | None, command: str | None = None) -> Harness:
    if name == "pi":
        return Pi(dialect or "openai_chat")
    if name == "shell":
        return Shell(command)
    if name not in HARNESSES:
        raise ValueError(f"unknown harness {name!r}: choose from {sorted(HARNESSES)}")
    return HARNESSES[name]()


@dataclass
class Work:
    """The stages' own state for one session (kept in `Session.data`)."""

    request: DispatchRequest
    runtime: Runtime | None = None
    api_key: str = ""
    exit_code: int | None = None
    agent_timed_out: bool = False
    log: dict[str, Any] = field(default_factory=dict)
    eval_ctx: EvalContext | None = None
    infra_error: str | None = None  # set when the session failed for the node's sake: masked
    logs: str | None = None  # the session's harness logs, kept outside the sandbox


class HarnessStages:
    def __init__(
        self,
        proxy: Proxy,
        proxy_url: str,
        root: Path,
        node_id: str,
        on_result: Callable[[SessionResult], Awaitable[None]],
    ):
        self.proxy, self.proxy_url, self.root, self.node_id = proxy, proxy_url, Path(root), node_id
        self.on_result = on_result

    async def init(self, session: Session) -> None:
        req: DispatchRequest = session.data
        work = Work(req)
        session.data = work
        spec = req.task.runtime
        work.runtime = make_runtime(spec, self.root, session.session_id, self.proxy_url)
        await work.runtime.start()
        task = req.task
        opened = self.proxy.sessions.open(
            metadata={"task_id": task.task_id, "sample": req.sample_index},
            upstream_url=task.upstream_url,
            upstream_model=task.upstream_model,
            max_tokens=task.max_output_tokens,
        )
        work.api_key = opened.api_key
        work.log["proxy_session"] = opened.id

    async def run(self, session: Session) -> None:
        work: Work = session.data
        task, runtime = work.request.task, work.runtime
        assert runtime is not None
        harness = harness_for(task.harness.name, task.harness.dialect, task.harness.command)
        try:
            work.log["harness_version"] = await asyncio.to_thread(check_install, harness)
        except HarnessNotInstalled as exc:
            work.infra_error = str(exc)
            raise
        launch = harness.launch(
            task.instruction,
            Endpoint(runtime.proxy_url or self.proxy_url, work.api_key),
            runtime.inside_home,  # paths as the harness sees them; its files are written on the host side
            runtime.inside_work,
            task.harness.max_steps,
        )
        launch.write_files(runtime.home)
        rc, out, err = await runtime.exec(launch.argv, launch.env, timeout=session.agent_timeout_s)
        work.exit_code, work.agent_timed_out = rc, rc == TIMEOUT_RC
        work.log.update(stdout=out[-20000:], stderr=err[-20000:])
        folder = self.root / "logs" / session.session_id
        work.logs = str(await asyncio.to_thread(keep_logs, folder, out, err, runtime.home, harness.log_files))

    async def prewarm_eval(self, session: Session) -> None:
        """Started next to RUN: the evaluator prepares its copy of the repo while the agent works.
        Never fails the session: `evaluate` redoes whatever prewarm did not finish."""
        work = session.data
        if not isinstance(work, Work) or work.runtime is None:
            return
        try:
            await make_evaluator(work.request.task.evaluator).prewarm(self._eval_ctx(session, work))
        except Exception:
            log.warning("evaluation prewarm failed for %s", session.session_id, exc_info=True)

    async def postrun(self, session: Session) -> None:
        work = session.data if isinstance(session.data, Work) else Work(session.data)
        t0 = time.monotonic()
        try:
            evaluation = await self._evaluate(session, work)
            work.log["evaluation_s"] = round(time.monotonic() - t0, 3)
            # building traces is CPU work: off the event loop, which must keep the node's heartbeats going
            result = await asyncio.to_thread(self._result, session, work, evaluation)
            result.timing.postrun_s = time.monotonic() - t0  # the pipeline's own clock stops after delivery
        finally:
            if work.runtime is not None:
                await work.runtime.stop()
            if work.eval_ctx is not None:
                shutil.rmtree(work.eval_ctx.scratch, ignore_errors=True)
        await self.on_result(result)

    def _eval_ctx(self, session: Session, work: Work) -> EvalContext:
        if work.eval_ctx is None:
            task, runtime = work.request.task, work.runtime
            work.eval_ctx = EvalContext(
                fields=task.fields,
                config=task.evaluator.config,
                work=runtime.work,
                scratch=self.root / "eval" / session.session_id,
                repo=Path(task.runtime.repo) if task.runtime.repo else None,
                home=runtime.home,
            )
        return work.eval_ctx

    async def _evaluate(self, session: Session, work: Work) -> Evaluation | None:
        """None when the agent never ran (masked); a bad task or a failing evaluator is masked too."""
        if work.runtime is None or work.log.get("proxy_session") is None:
            return None
        if work.infra_error is not None:
            return Evaluation.infra(work.infra_error)
        status = session.outcome or SessionState.COMPLETED
        if status is SessionState.CANCELLED:  # early stop or shutdown: not graded, and never a 0 in training
            return Evaluation.infra(f"not graded: {session.cause or 'cancelled'}")
        ctx = self._eval_ctx(session, work)
        ctx.status, ctx.exit_code = status, work.exit_code
        ctx.timeout_s = max(session.remaining(), EVAL_MIN_S)
        try:
            return await make_evaluator(work.request.task.evaluator).evaluate(ctx)
        except Exception as exc:
            log.warning("evaluation failed for %s", session.session_id, exc_info=True)
            return Evaluation.infra(f"{type(exc).__name__}: {exc}")

    def _result(self, session: Session, work: Work, evaluation: Evaluation | None) -> SessionResult:
        task = work.request.task
        session_id = work.log.get("proxy_session")
        stats, traces_path = {}, None
        if session_id is not None:
            self.proxy.store.flush()
            records = self.proxy.store.records(session_id)
            built = build(records, task.builder)
            messages = {r.id: r.message for r in records if r.message}
            for trace in built.traces:  # each call's text travels with its trace (NeMo-RL's text checks read it)
                trace.metadata["messages"] = {rid: messages[rid] for rid in trace.record_ids if rid in messages}
            traces_path = str(self.root / "traces" / f"{session.session_id}.jsonl")
            Path(traces_path).parent.mkdir(parents=True, exist_ok=True)
            write_jsonl(built, traces_path, session_id=session.session_id)
            stats = built.stats.model_dump()
        status = session.outcome or SessionState.COMPLETED
        failure = "the agent never ran" if evaluation is None else evaluation.infrastructure_error
        evaluated = {} if evaluation is None else {"evaluator": task.evaluator.kind, **evaluation.model_dump()}
        return SessionResult(
            session_id=session.session_id,
            task_id=task.task_id or "",
            status=status,
            reward=None if failure else evaluation.reward,
            reward_components={} if failure else evaluation.components,
            masked=failure is not None,
            traces_path=traces_path,
            stats=stats
            | {"exit_code": work.exit_code, "agent_timed_out": work.agent_timed_out, "finished_at": time.time()}
            | {"logs": work.logs, "harness_version": work.log.get("harness_version")}
            | {"evaluation_s": work.log.get("evaluation_s")}
            | ({"evaluation": evaluated} if evaluated else {}),
            timing=session.timing.model_copy(),
            node_id=self.node_id,
            error=session.error or session.cause or (f"evaluation: {failure}" if evaluation and failure else None),
        )
