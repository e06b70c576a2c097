"""`polar tasks check`: every bundled task graded three ways: reference fix -> 1.0, no change -> 0.0,
wrong fix -> 0.0.

The SWE-style tasks (the bundled ones, and rows of your own with a `repo_path`), by the `tests` evaluator: each
check plays the agent with a copy of the task repo cut at `base_commit`, the row's `patch` (or its `wrong_patch`,
where it has one) written into it with `git apply`, then the evaluator as the gateway calls it. The no-change
check runs the tests too (`run_empty`), so it proves the hidden tests fail on the bug.

The Harbor-format tasks (bundled/harbor/, or a folder of your own), by the `harbor` evaluator, in each runtime of
`runtimes`
(`local`; `image` on Debian's root filesystem with python3 when scripts/setup.sh rootfs built it; `docker`,
each task's own Dockerfile built, where an engine answers):
a session's sandbox from the task's own runtime mapping, `solution/solve.sh` (or the task's
`solution/wrong.sh`, or nothing) run in it as the agent, then the task's own tests/test.sh. What each check should
give is 1 / 0 / 0 (the wrong fix only where `solution/wrong.sh` is) unless `expected` says otherwise for the task: a
partial score, or "masked" for a verifier that gives no valid reward.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..evaluators.base import EvalContext, Evaluation
from ..evaluators.boxes import FILES, HostBox
from ..evaluators.harbor import HarborEvaluator
from ..evaluators.patch import apply_patch
from ..evaluators.tests import TestsEvaluator
from ..paths import DEPS
from ..runtimes.docker import DockerRuntime
from ..runtimes.fresh import FreshSandbox
from ..runtimes.history import copy_repo, future
from ..runtimes.spec import RuntimeSpec
from .bundled import TASKS
from .dataset import TaskRow
from .harbor import HarborTask, bundled
from .materialize import materialize, row
from .model import BundledTask

CHECKS = (("reference", 1.0), ("no_change", 0.0), ("wrong_fix", 0.0))
# the bundled repos need no pytest plugins, and loading the environment's costs most of each run
CONFIG = {"run_empty": True, "env": {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}}
USER_CONFIG = {"run_empty": True}  # a repository of your own may need its pytest plugins
HARBOR_SCRIPTS = {"reference": "solve.sh", "no_change": None, "wrong_fix": "wrong.sh"}
ROOTFS_PYTHON = DEPS / "rootfs" / "bookworm-python"  # scripts/setup.sh rootfs: Debian with python3, pytest, git
SOLVE_TIMEOUT_S = 120.0


def harbor_runtimes() -> list[dict[str, Any]]:
    """The runtime blocks the Harbor tasks are checked in: local; image where its root filesystem is; docker
    where an engine answers (each task's own Dockerfile built there)."""
    out: list[dict[str, Any]] = [{"kind": "local"}]
    if (ROOTFS_PYTHON / "bin" / "sh").exists():
        out.append({"kind": "image", "image": str(ROOTFS_PYTHON)})
    if DockerRuntime.available():
        out.append({"kind": "docker"})
    return out


MASKED = "masked"  # an expectation: the verifier gives no valid reward, and the session is masked
Expected = float | str


def harbor_checks(
    task: HarborTask, expected: dict[str, dict[str, Expected]] | None = None
) -> list[tuple[str, Expected]]:
    """(check, what it should give) for one Harbor task: 1 / 0, and 0 for `solution/wrong.sh` where the task has
    one, each overridden by `expected[task name or id]` (e.g. {"reference": 0.5, "no_change": "masked"})."""
    checks = {"reference": 1.0, "no_change": 0.0}
    if (task.solution / HARBOR_SCRIPTS["wrong_fix"]).is_file():
        checks["wrong_fix"] = 0.0
    mine = (expected or {}).get(task.name) or (expected or {}).get(task.task_id) or {}
    unknown = set(mine) - set(HARBOR_SCRIPTS)
    if unknown:
        raise ConfigError(f"expected[{task.name}]: no check {sorted(unknown)}; the checks: {list(HARBOR_SCRIPTS)}")
    return list((checks | mine).items())


def history_warnings(rows: list[TaskRow]) -> list[dict[str, Any]]:
    """{task, warning} for each row whose `repo_path` holds history past its `base_commit`: the fix is
    likely among it. Every session's copy is cut at `base_commit` (runtimes/history.py), so nothing of it
    reaches an agent; the warning is about the data, which leaks to any tool that does not cut it."""
    out = []
    for r in rows:
        if r.repo_path:
            out += [{"task": r.instance_id, "warning": w} for w in future(Path(r.repo_path), r.base_commit)]
    return out


def row_checks(task: TaskRow) -> list[tuple[str, float]]:
    """(check, what it should give) for one SWE row: its `patch` 1, no change 0, its `wrong_patch` 0 where it has
    one."""
    return [(c, e) for c, e in CHECKS if c != "wrong_fix" or (task.model_extra or {}).get("wrong_patch")]


def check_tasks(
    tasks: tuple[BundledTask, ...] = TASKS,
    workers: int | None = None,
    harbor: list[HarborTask] | None = None,
    runtimes: list[dict[str, Any]] | None = None,
    expected: dict[str, dict[str, Expected]] | None = None,
    rows: tuple[TaskRow, ...] | list[TaskRow] = (),
) -> dict[str, Any]:
    """{"tasks", "checks", "correct", "failures": [{task, check, got, expected, detail, [runtime]}],
    "runtimes" (those the Harbor tasks ran in), "elapsed_s"}. `rows`: SWE rows of your own, each graded on its
    `repo_path`."""
    harbor = bundled() if harbor is None else harbor
    runtimes = harbor_runtimes() if runtimes is None else runtimes
    checks = {t.task_id: harbor_checks(t, expected) for t in harbor}
    workers = workers or min(8, (os.cpu_count() or 2) * 2)
    return asyncio.run(_check_all(tasks, list(rows), harbor, checks, runtimes, workers))


async def _check_all(
    tasks: tuple[BundledTask, ...],
    rows: list[TaskRow],
    harbor: list[HarborTask],
    checks: dict[str, list[tuple[str, Expected]]],
    runtimes: list[dict[str, Any]],
    workers: int,
) -> dict[str, Any]:
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="polar-tasks-check-") as tmp:
        root = Path(tmp)
        commits = await asyncio.to_thread(materialize, root / "repos", tasks)
        repos = [(TaskRow.parse(row(t, commits[t.instance_id])), root / "repos" / t.instance_id) for t in tasks]
        repos += [(r, Path(r.repo_path) if r.repo_path else None) for r in rows]
        copies = {t.task_id: await asyncio.to_thread(t.working_copy, root / "harbor" / t.task_id) for t in harbor}
        gate = asyncio.Semaphore(workers)
        jobs = [
            _check_one(gate, r, repo, root / "runs" / str(i), c, e, CONFIG if i < len(tasks) else USER_CONFIG)
            for i, (r, repo) in enumerate(repos)
            for c, e in row_checks(r)
        ]
        jobs += [
            _check_harbor(gate, t, copies[t.task_id], rt, root / "runs", c, e)
            for t in harbor
            for rt in runtimes
            for c, e in checks[t.task_id]
        ]
        outcomes = await asyncio.gather(*jobs)
    failures = [o for o in outcomes if o is not None]
    return {
        "tasks": len(tasks) + len(rows) + len(harbor),
        "checks": len(outcomes),
        "correct": len(outcomes) - len(failures),
        "failures": failures,
        "runtimes": [r["kind"] for r in runtimes],
        "elapsed_s": round(time.monotonic() - t0, 2),
    }


async def _check_harbor(
    gate: asyncio.Semaphore,
    task: HarborTask,
    copy: Path | None,
    block: dict[str, Any],
    runs: Path,
    check: str,
    expected: Expected,
) -> dict[str, Any] | None:
    """One Harbor task, one runtime, one check: the solution as the agent, then the task's own verifier."""
    kind = block["kind"]
    fail = {"task": task.task_id, "check": check, "runtime": kind, "got": None, "expected": expected}
    async with gate:
        spec = RuntimeSpec.model_validate(task.runtime(block | {"network": "none"}, copy))
        name = f"{task.task_id}-{kind}-{check}"
        runtime, fresh = spec.make(runs, name, ""), FreshSandbox(spec, runs, f"{name}-eval")
        try:
            await runtime.start()
            result = await _solve_and_verify(task, runtime, fresh, HARBOR_SCRIPTS[check], runs / f"{name}-scratch")
        except Exception as exc:  # a runtime that does not start is a failed check, with its reason
            return fail | {"detail": f"{type(exc).__name__}: {exc}"}
        finally:
            await runtime.stop()
            await fresh.stop()
            await asyncio.to_thread(shutil.rmtree, runs / f"{name}-scratch", True)
    if isinstance(result, str):
        return fail | {"detail": result}
    if result.infrastructure_error is not None:
        if expected == MASKED:
            return None
        return fail | {"detail": result.infrastructure_error + " " + str(result.details.get("log_tail", ""))[-500:]}
    if result.reward != expected:
        return fail | {"got": result.reward, "detail": str(result.details.get("log_tail", ""))[-1000:]}
    return None


async def _solve_and_verify(
    task: HarborTask, runtime: Any, fresh: FreshSandbox, script: str | None, scratch: Path
) -> Evaluation | str:
    """The solution as the agent, then what the gateway does before grading, then the task's verifier."""
    if script is not None:
        await asyncio.to_thread(shutil.copytree, task.solution, runtime.home / FILES / "solution")
        path = runtime.inside_home / FILES / "solution" / script
        rc, out, err = await runtime.exec(["bash", str(path)], None, SOLVE_TIMEOUT_S)
        if rc != 0:
            return f"solution/{script} failed (rc {rc}): {(err or out).strip()[-500:]}"
    in_image = runtime.in_image
    await runtime.quiesce()
    ctx = EvalContext(
        fields=task.fields(),
        config={},
        work=runtime.work,
        scratch=scratch,
        home=runtime.home,
        sandbox=runtime if in_image else None,
        fresh_work=(lambda: fresh.with_work(runtime)) if in_image else None,
        changed_outside=await runtime.changed_outside(),
    )
    return await HarborEvaluator().evaluate(ctx)


async def _check_one(
    gate: asyncio.Semaphore,
    task: TaskRow,
    repo: Path | None,
    runs: Path,
    check: str,
    expected: float,
    config: dict[str, Any],
) -> dict[str, Any] | None:
    if repo is None:
        return _failure(task, check, None, expected, "no repo_path: the row is graded on a copy of it")
    async with gate:
        folder = runs / f"{task.instance_id.replace('/', '_')}-{check}"
        work = folder / "work"
        try:
            await asyncio.to_thread(copy_repo, repo, work, task.base_commit)
            patch = {
                "reference": task.patch,
                "no_change": "",
                "wrong_fix": (task.model_extra or {}).get("wrong_patch"),
            }
            if check != "no_change" and not patch[check]:
                return _failure(
                    task, check, None, expected, f"the row has no {'patch' if check == 'reference' else 'wrong_patch'}"
                )
            applied, why = await apply_patch(HostBox(work, folder / "home"), patch[check], "check.diff")
            if not applied:
                return _failure(task, check, None, expected, f"the {check} patch does not apply: {why}")
            ctx = EvalContext(
                fields=task.model_dump(mode="json"), config={}, work=work, scratch=folder / "scratch", repo=repo
            )
            result = await TestsEvaluator(config).evaluate(ctx)
        finally:
            await asyncio.to_thread(shutil.rmtree, folder, True)
    if result.infrastructure_error is not None:
        return _failure(task, check, None, expected, result.infrastructure_error)
    if result.reward != expected:
        return _failure(task, check, result.reward, expected, _detail(result.details))
    tests = result.details.get("tests", {})
    if check == "no_change" and any(tests.get(t) != "PASSED" for t in task.PASS_TO_PASS):
        why = "PASS_TO_PASS fails on the bug: " + _detail(result.details)
        return _failure(task, check, result.reward, expected, why)
    return None


def _failure(task: TaskRow, check: str, got: float | None, expected: float, detail: str) -> dict[str, Any]:
    return {"task": task.instance_id, "check": check, "got": got, "expected": expected, "detail": detail}


def _detail(details: dict[str, Any]) -> str:
    tests = details.get("tests") or {}
    return ", ".join(f"{k}={v}" for k, v in tests.items()) or str(details.get("log_tail", ""))[-1000:]
