"""POST-RUN grades with the task's evaluator: a shell "agent" fixes a bundled task inside the sandbox."""

from __future__ import annotations

import asyncio

from nemo_polar.contracts import DispatchRequest, FailureKind, SessionResult, TaskSpec
from nemo_polar.server.gateway.pipeline import Pipeline
from nemo_polar.server.gateway.stages import HarnessStages
from nemo_polar.states import SessionState

FIX = "sed -i 's|return total // per_page|return -(-total // per_page)|' pager/core.py"


def _run(proxy, tmp_path, command: str, row: dict, repo) -> SessionResult:
    results: list[SessionResult] = []

    async def on_result(result: SessionResult) -> None:
        results.append(result)

    task = TaskSpec(
        task_id="t1",
        instruction="fix the pager",
        fields=row,
        harness={"name": "shell", "command": command},
        runtime={"repo": str(repo)},
        evaluator={"kind": "tests", "config": {"env": {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}}},
        agent_timeout_s=60,
    )

    async def main() -> None:
        stages = HarnessStages(proxy.proxy, proxy.url, tmp_path / "node", "node-1", on_result)
        async with Pipeline(1, 1, 1, 1, stages) as pipeline:
            await pipeline.submit(stages.job(DispatchRequest(session_id="s-1", task=task, callback_url="x")))

    asyncio.run(main())
    (result,) = results
    assert not (tmp_path / "node" / "eval" / "s-1").exists()  # the evaluation scratch is gone
    return result


def test_the_fix_scores_one(proxy, task_copy, tmp_path):
    _, row, pristine, _ = task_copy("paginate")
    result = _run(proxy, tmp_path, FIX, row, pristine)
    assert result.status is SessionState.COMPLETED and not result.masked and result.failure_kind is None
    assert result.reward == 1.0 and result.reward_components == {"resolved": 1.0}
    assert result.stats["evaluation"]["evaluator"] == "tests"
    assert result.stats["evaluation"]["details"]["fail_to_pass"] == 1.0


def test_no_fix_scores_zero_and_a_bad_row_is_masked(proxy, task_copy, tmp_path):
    _, row, pristine, _ = task_copy("paginate")
    assert _run(proxy, tmp_path / "a", "true", row, pristine).reward == 0.0
    bad = _run(proxy, tmp_path / "b", FIX, {k: v for k, v in row.items() if k != "FAIL_TO_PASS"}, pristine)
    assert bad.masked and bad.reward is None and "FAIL_TO_PASS" in bad.error
    assert bad.failure_kind is FailureKind.VERIFIER_ERROR  # named where the evaluation failed, not read from its words
