"""One session through the staged pipeline with a real harness (Pi) in a real sandbox, against the
proxy (fake upstream: this is about the node's wiring, the model is not the point)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from nemo_polar.contracts import DispatchRequest, SessionResult, TaskSpec
from nemo_polar.harnesses.shell import CHECK_AGENT
from nemo_polar.harnesses.versions import PINS
from nemo_polar.server.gateway.pipeline import Pipeline
from nemo_polar.server.gateway.stages import HarnessStages
from nemo_polar.states import SessionState
from nemo_polar.traces.export import read_jsonl


def _request(session_id: str, runtime: dict | None = None, **harness) -> DispatchRequest:
    task = TaskSpec(
        task_id="t1",
        instruction="Say hello.",
        harness={"name": "pi", "max_steps": 2} | harness,
        runtime=runtime or {},
        agent_timeout_s=120,
    )
    return DispatchRequest(session_id=session_id, task=task, callback_url="http://unused")


def run_one(proxy, tmp_path: Path, request: DispatchRequest) -> SessionResult:
    """One session through a one-slot pipeline of real stages; its delivered result."""
    results: list[SessionResult] = []

    async def on_result(result: SessionResult) -> None:
        results.append(result)

    async def main() -> None:
        stages = HarnessStages(proxy.proxy, proxy.url, tmp_path / "node", "node-1", on_result)
        async with Pipeline(1, 1, 1, 1, stages) as pipeline:
            await pipeline.submit(stages.job(request))

    asyncio.run(main())
    (result,) = results
    return result


def test_a_session_runs_and_leaves_a_result_traces_and_no_sandbox(proxy, tmp_path):
    result = run_one(proxy, tmp_path, _request("s-1"))
    assert result.status is SessionState.COMPLETED and result.reward == 1.0 and not result.masked
    assert result.stats["exit_code"] == 0 and result.stats["trainable"] >= 1
    (trace,) = read_jsonl(result.traces_path)
    assert sum(trace.loss_mask) > 0
    assert set(trace.metadata["messages"]) == set(trace.record_ids)  # each call's text travels with its trace
    assert not (tmp_path / "node" / "s-1").exists()  # the sandbox folder is gone
    logs = Path(result.stats["logs"])  # the harness's output outlives it
    assert logs == tmp_path / "node" / "logs" / "s-1"
    assert (logs / "stdout.txt").exists() and (logs / "stderr.txt").exists()
    assert result.stats["harness_version"] == PINS["pi"].version


ONE_CALL = Path(__file__).resolve().parents[3] / "examples" / "one_call_agent.py"


def test_a_final_sessions_key_is_refused_and_its_records_stay_readable(proxy, tmp_path, monkeypatch):
    keys = []
    open_session = proxy.proxy.open_session
    monkeypatch.setattr(proxy.proxy, "open_session", lambda **kw: keys.append(open_session(**kw)) or keys[-1])
    examples = f"{ONE_CALL.parent}:{ONE_CALL.parent}"  # the sandbox sees no host folder it is not given
    request = _request("s-2", {"volumes": [examples]}, name="shell", command=f"python3 {ONE_CALL}")
    result = run_one(proxy, tmp_path, request)
    assert result.status is SessionState.COMPLETED and result.proxy_session_id
    (opened,) = [s for s in proxy.proxy.store.sessions() if s.id == result.proxy_session_id]
    assert opened.metadata["rollout_session"] == "s-2"  # the one link between the two sessions
    (key,) = [s.api_key for s in keys]
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    late = httpx.post(proxy.url + "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key}"})
    assert late.status_code == 401
    kept = httpx.get(f"{proxy.url}/admin/sessions/{opened.id}/completions").json()["data"]
    assert len(kept) == 1 and kept[0]["status"] == "ok"


def test_a_failure_of_the_node_in_run_is_masked_not_scored(proxy, tmp_path, monkeypatch):
    """The harness could not even be launched (a bug, a broken install): the node's fault, so the session
    is masked; a reward of 0 would train the policy on an infrastructure failure."""
    from nemo_polar.harnesses import shell

    def broken(self, *args, **kwargs):
        raise OSError("the toolchain is not mounted")

    monkeypatch.setattr(shell.Shell, "launch", broken)
    result = run_one(proxy, tmp_path, _request("s-3", name="shell", command="true"))
    assert result.status is SessionState.ERROR and result.masked and result.reward is None
    assert "OSError: the toolchain is not mounted" in result.error


# a harness that never stops calling the model, whatever it is answered
LOOPING = f"while true; do\n{CHECK_AGENT}\ndone"


def _budgeted(session_id: str, **budget) -> DispatchRequest:
    task = TaskSpec(
        task_id="t1",
        instruction="Say hello.",
        harness={"name": "shell", "command": LOOPING},
        budget=budget,
        agent_timeout_s=300,
    )
    return DispatchRequest(session_id=session_id, task=task, callback_url="http://unused")


def test_a_session_that_spends_its_budget_is_stopped_and_masked_not_left_to_its_timeout(proxy, tmp_path):
    started = time.monotonic()
    result = run_one(proxy, tmp_path, _budgeted("s-b1", calls=3))
    assert time.monotonic() - started < 60  # not the agent's 300 s
    assert result.status is SessionState.COMPLETED and result.masked and result.reward is None
    assert result.error == "session budget spent: 3 model calls (its budget: 3)"
    assert result.stats["budget_spent"] == result.error and not result.stats["agent_timed_out"]
    assert len(proxy.proxy.records(result.proxy_session_id)) == 3


def test_a_spent_budget_is_graded_as_it_stands_when_the_task_says_so(proxy, tmp_path):
    result = run_one(proxy, tmp_path, _budgeted("s-b2", calls=2, on_spent="score"))
    assert not result.masked and result.reward == 0.0  # session_completed: a harness that was stopped did not end
    assert result.stats["budget_spent"].startswith("session budget spent: 2 model calls")


@pytest.mark.parametrize("on_exceeded", ["mask", "score"])
def test_a_session_past_a_limit_ends_with_its_reason_masked_or_graded_as_the_task_says(proxy, tmp_path, on_exceeded):
    task = TaskSpec(
        task_id="t1",
        instruction="x",
        harness={"name": "shell", "command": "yes polar"},  # an endless stream on stdout
        runtime={"kind": "local", "limits": {"output": "1m", "on_exceeded": on_exceeded}},
        agent_timeout_s=300,
    )
    started = time.monotonic()
    result = run_one(proxy, tmp_path, DispatchRequest(session_id=f"s-l-{on_exceeded}", task=task, callback_url="x"))
    assert time.monotonic() - started < 60  # not the agent's 300 s
    why = "limit: output (1m): a command wrote more to stdout and stderr"
    assert result.stats["limit_exceeded"] == why and not result.stats["agent_timed_out"]
    assert result.stats["limits_held_by"] in ("cgroup v1 (pids, memory)", "cgroup v2", "rlimits")  # said which
    if on_exceeded == "mask":
        assert result.masked and result.reward is None and result.error == why
    else:
        assert not result.masked and result.reward == 0.0  # session_completed: the harness did not end by itself


def test_the_logs_kept_of_a_harness_that_printed_its_environment_show_no_secret(proxy, tmp_path):
    secret = "sk-live-7f3a9c2e"
    task = TaskSpec(
        task_id="t1",
        instruction="x",
        harness={"name": "shell", "command": "env; echo $POLAR_TOKEN >&2"},
        runtime={"kind": "local", "env": {"POLAR_TOKEN": secret}},
    )
    result = run_one(proxy, tmp_path, DispatchRequest(session_id="s-env", task=task, callback_url="x"))
    kept = Path(result.stats["logs"])
    out, err = (kept / "stdout.txt").read_text(), (kept / "stderr.txt").read_text()
    assert "POLAR_TOKEN=[redacted]" in out and err.strip() == "[redacted]"
    assert secret not in out + err


def test_a_harness_that_ignores_max_steps_is_held_to_it_by_the_proxy():
    task = TaskSpec(instruction="x", harness={"name": "opencode", "max_steps": 7})
    assert task.call_budget == 7  # opencode has no step limit of its own
    assert TaskSpec(instruction="x", harness={"name": "claude_code", "max_steps": 7}).call_budget is None
    assert TaskSpec(instruction="x", harness={"name": "codex"}, budget={"calls": 50}).call_budget == 50
