"""What a gateway node does in each stage of a session, for a real harness in a real sandbox.

INIT: a sandbox (working copy + HOME) and a proxy session whose key is the harness's API key.
RUN: the harness, unchanged, inside the sandbox, bounded by the agent budget.
POST-RUN: the session's records become traces, the evaluator gives the reward, the sandbox goes.
Whatever happened, POST-RUN produces a `SessionResult`; `on_result` delivers it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from ...proxy.app import Proxy
from ...traces import build
from ...traces.export import write_jsonl
from ..contracts import DispatchRequest, SessionResult, SessionState
from .harnesses import HARNESSES, Endpoint, Harness
from .harnesses.pi import Pi
from .harnesses.shell import Shell
from .pipeline import Session
from .runtime import TIMEOUT_RC, LocalRuntime


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
    runtime: LocalRuntime | None = None
    api_key: str = ""
    exit_code: int | None = None
    agent_timed_out: bool = False
    log: dict[str, str] = field(default_factory=dict)


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
        work.runtime = LocalRuntime(self.root, repo=spec.repo, sandbox=spec.sandbox, session_id=session.session_id)
        await work.runtime.start()
        opened = self.proxy.sessions.open(metadata={"task_id": req.task.task_id, "sample": req.sample_index})
        work.api_key = opened.api_key
        work.log["proxy_session"] = opened.id

    async def run(self, session: Session) -> None:
        work: Work = session.data
        task, runtime = work.request.task, work.runtime
        assert runtime is not None
        harness = harness_for(task.harness.name, task.harness.dialect, task.harness.command)
        launch = harness.launch(
            task.instruction,
            Endpoint(self.proxy_url, work.api_key),
            runtime.home,
            runtime.work,
            task.harness.max_steps,
        )
        launch.write_files(runtime.home)
        rc, out, err = await runtime.exec(launch.argv, launch.env, timeout=session.agent_timeout_s)
        work.exit_code, work.agent_timed_out = rc, rc == TIMEOUT_RC
        work.log.update(stdout=out[-20000:], stderr=err[-20000:])

    async def postrun(self, session: Session) -> None:
        work = session.data if isinstance(session.data, Work) else Work(session.data)
        try:
            result = self._result(session, work)
        finally:
            if work.runtime is not None:
                await work.runtime.stop()
        await self.on_result(result)

    def _result(self, session: Session, work: Work) -> SessionResult:
        task = work.request.task
        session_id = work.log.get("proxy_session")
        stats, traces_path = {}, None
        if session_id is not None:
            self.proxy.store.flush()
            built = build(self.proxy.store.records(session_id), task.builder)
            traces_path = str(self.root / "traces" / f"{session.session_id}.jsonl")
            Path(traces_path).parent.mkdir(parents=True, exist_ok=True)
            write_jsonl(built, traces_path, session_id=session.session_id)
            stats = built.stats.model_dump()
        status = session.outcome or SessionState.COMPLETED
        infrastructure = work.runtime is None or session_id is None  # never reached the agent
        reward = None if infrastructure else float(status is SessionState.COMPLETED and work.exit_code == 0)
        return SessionResult(
            session_id=session.session_id,
            task_id=task.task_id or "",
            status=status,
            reward=reward,
            reward_components={"session_completed": reward} if reward is not None else {},
            masked=infrastructure,
            traces_path=traces_path,
            stats=stats
            | {"exit_code": work.exit_code, "agent_timed_out": work.agent_timed_out, "finished_at": time.time()},
            timing=session.timing,
            node_id=self.node_id,
            error=session.error or session.cause,
        )
