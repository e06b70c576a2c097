"""`polar tasks check`: every bundled task, graded by the `tests` evaluator three ways.

reference fix -> 1.0, no change -> 0.0, wrong fix -> 0.0. Each check plays the agent: a copy of the
task repo, the patch written into it with `git apply`, then the evaluator as the gateway calls it.
The no-change check runs the tests too (`run_empty`), so it proves the hidden tests fail on the bug.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from ..evaluators.base import EvalContext
from ..evaluators.patch import apply_patch
from ..evaluators.tests import TestsEvaluator
from .bundled import TASKS
from .materialize import materialize, row
from .model import BundledTask

CHECKS = (("reference", 1.0), ("no_change", 0.0), ("wrong_fix", 0.0))
# the bundled repos need no pytest plugins, and loading the environment's costs most of each run
CONFIG = {"run_empty": True, "env": {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}}


def check_tasks(tasks: tuple[BundledTask, ...] = TASKS, workers: int | None = None) -> dict[str, Any]:
    """{"tasks", "checks", "correct", "failures": [{task, check, got, expected, detail}], "elapsed_s"}."""
    return asyncio.run(_check_all(tasks, workers or min(8, (os.cpu_count() or 2) * 2)))


async def _check_all(tasks: tuple[BundledTask, ...], workers: int) -> dict[str, Any]:
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="polar-tasks-check-") as tmp:
        root = Path(tmp)
        commits = await asyncio.to_thread(materialize, root / "repos", tasks)
        gate = asyncio.Semaphore(workers)
        jobs = [
            _check_one(gate, t, row(t, commits[t.instance_id]), root / "repos" / t.instance_id, root / "runs", c, e)
            for t in tasks
            for c, e in CHECKS
        ]
        outcomes = await asyncio.gather(*jobs)
    failures = [o for o in outcomes if o is not None]
    return {
        "tasks": len(tasks),
        "checks": len(outcomes),
        "correct": len(outcomes) - len(failures),
        "failures": failures,
        "elapsed_s": round(time.monotonic() - t0, 2),
    }


async def _check_one(
    gate: asyncio.Semaphore, task: BundledTask, fields: dict, repo: Path, runs: Path, check: str, expected: float
) -> dict[str, Any] | None:
    async with gate:
        folder = runs / f"{task.name}-{check}"
        work = folder / "work"
        try:
            await asyncio.to_thread(shutil.copytree, repo, work, symlinks=True)
            patch = {"reference": task.patch, "no_change": "", "wrong_fix": task.wrong_patch}[check]
            applied, why = await apply_patch(patch, work)
            if not applied:
                return _failure(task, check, None, expected, f"the {check} patch does not apply: {why}")
            ctx = EvalContext(fields=fields, config={}, work=work, scratch=folder / "scratch", repo=repo)
            result = await TestsEvaluator(CONFIG).evaluate(ctx)
        finally:
            await asyncio.to_thread(shutil.rmtree, folder, True)
    if result.infrastructure_error is not None:
        return _failure(task, check, None, expected, result.infrastructure_error)
    if result.reward != expected:
        return _failure(task, check, result.reward, expected, _detail(result.details))
    tests = result.details.get("tests", {})
    if check == "no_change" and any(tests.get(t) != "PASSED" for t in task.pass_to_pass):
        why = "PASS_TO_PASS fails on the bug: " + _detail(result.details)
        return _failure(task, check, result.reward, expected, why)
    return None


def _failure(task: BundledTask, check: str, got: float | None, expected: float, detail: str) -> dict[str, Any]:
    return {"task": task.instance_id, "check": check, "got": got, "expected": expected, "detail": detail}


def _detail(details: dict[str, Any]) -> str:
    tests = details.get("tests") or {}
    return ", ".join(f"{k}={v}" for k, v in tests.items()) or str(details.get("log_tail", ""))[-1000:]
