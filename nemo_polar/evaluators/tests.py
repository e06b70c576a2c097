"""`tests`: the SWE-bench recipe, run locally with pytest.

prewarm:  a fresh copy of the task repo at `base_commit`, with the task's hidden `test_patch` applied.
evaluate: the agent's patch (working copy vs `base_commit`, junk dropped) applied on that copy — its
          changes to the files `test_patch` owns are left out, as SWE-bench resets them — then the
          FAIL_TO_PASS + PASS_TO_PASS tests, graded from pytest's `-rA` summary.

In an image (`ctx.sandbox`): the patch is read in the agent's sandbox, and the same steps run in a
fresh sandbox of the same image (`ctx.fresh()`, its `eval_prepare` done): the hidden tests applied to
the image's repository, then the agent's patch, then the test command with the image's own Python
(`python3 -m pytest` unless the row or config names one).

reward = components["resolved"] = 1.0 only when every FAIL_TO_PASS test passes and every PASS_TO_PASS
test passes (or is skipped); the fractions are in `details`. A test run that hits its timeout scores 0
(the agent's code may hang); set `timeout_is_infrastructure` to mask it instead.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import Field

from ..config import Strict
from ..sandbox import TIMEOUT_RC
from .base import Completed, EvalContext, Evaluation, Evaluator, Sandbox, run
from .inside import apply_inside, extract_inside
from .patch import GitError, apply_patch, extract_patch, fresh_copy, patch_paths
from .pytest_log import PASSING, parse_summary
from .row import EvalRow

CANNOT_START_RC = (126, 127)  # the shell's "not executable" / "not found"
PREPARED = "prepared.json"


class TestsConfig(Strict):
    __test__ = False  # not a pytest test class, whatever its name
    test_command: str | list[str] | None = Field(
        None, description="overrides the row's `test_cmd`; a string runs under sh -c; `{tests}` = the test ids"
    )
    timeout_s: float = Field(900.0, gt=0, description="the test run")
    exclude: list[str] = Field(default_factory=list, description="more globs left out of the agent's patch")
    env: dict[str, str] = Field(default_factory=dict, description="added to the test run's environment")
    run_empty: bool = Field(False, description="run the tests even when the agent changed nothing")
    sandbox: bool = Field(
        True, description="run the agent's code under bubblewrap (where installed): only the copy writable, no network"
    )
    timeout_is_infrastructure: bool = False


class TestsEvaluator(Evaluator):
    __test__ = False
    name = "tests"
    Settings = TestsConfig

    async def prewarm(self, ctx: EvalContext) -> None:
        row = EvalRow.parse(ctx.fields)
        await (self.prepare_inside(ctx, row) if ctx.sandbox is not None else self.prepare(ctx, row))

    async def evaluate(self, ctx: EvalContext) -> Evaluation:
        row = EvalRow.parse(ctx.fields)
        if ctx.sandbox is not None:
            return await self.evaluate_inside(ctx, row)
        started = time.monotonic()
        try:
            prepared = await self.prepare(ctx, row)
            patch = ctx.patch if ctx.patch is not None else await self._extract(ctx, row)
        except (GitError, OSError) as exc:
            return Evaluation.infra(str(exc))
        details: dict[str, Any] = {"patch_bytes": len(patch.encode()), "test_files": prepared["test_files"]}
        if not patch.strip() and not self.settings.run_empty:
            return Evaluation(reward=0.0, components={"resolved": 0.0}, details=details | {"empty_patch": True})
        try:
            applied, why = await apply_patch(patch, self.eval_dir(ctx), exclude=prepared["test_files"])
        except GitError as exc:
            return Evaluation.infra(str(exc), **details)
        if not applied:
            return Evaluation(reward=0.0, components={"resolved": 0.0}, details=details | {"apply_error": why})
        budget = max(1.0, min(self.settings.timeout_s, ctx.timeout_s - (time.monotonic() - started)))
        env, where = self.env(ctx), self.eval_dir(ctx)
        done = await run(
            self.command(row), where, env, budget, sandbox=self.settings.sandbox, writable=[where, Path(env["HOME"])]
        )
        details |= {
            "sandboxed": done.extra.get("sandboxed", False),
            "test_rc": done.rc,
            "test_timed_out": done.timed_out,
            "log_tail": (done.out + done.err)[-4000:],
        }
        if (problem := self.cannot_run(done)) is not None:
            return Evaluation.infra(problem, **details)
        return await self.grade(ctx, row, done, details)

    async def evaluate_inside(self, ctx: EvalContext, row: EvalRow) -> Evaluation:
        """The same judgement, in the session's image: patch from the agent's sandbox, tests in a fresh one."""
        started = time.monotonic()
        try:
            patch = ctx.patch if ctx.patch is not None else await self.extract_inside(ctx, row)
            box, prepared = await self.prepare_inside(ctx, row)
        except (GitError, OSError) as exc:
            return Evaluation.infra(str(exc))
        details: dict[str, Any] = {"patch_bytes": len(patch.encode()), "test_files": prepared["test_files"]}
        details["in_image"] = True
        if not patch.strip() and not self.settings.run_empty:
            return Evaluation(reward=0.0, components={"resolved": 0.0}, details=details | {"empty_patch": True})
        try:
            applied, why = await apply_inside(box, patch, "agent.diff", exclude=prepared["test_files"])
        except GitError as exc:
            return Evaluation.infra(str(exc), **details)
        if not applied:
            return Evaluation(reward=0.0, components={"resolved": 0.0}, details=details | {"apply_error": why})
        budget = max(1.0, min(self.settings.timeout_s, ctx.timeout_s - (time.monotonic() - started)))
        done = await run_inside(box, self.command(row, python="python3"), self.settings.env | _INSIDE_ENV, budget)
        details |= {"test_rc": done.rc, "test_timed_out": done.timed_out, "log_tail": (done.out + done.err)[-4000:]}
        if (problem := self.cannot_run(done)) is not None:
            return Evaluation.infra(problem, **details)
        return await self.grade(ctx, row, done, details)

    async def extract_inside(self, ctx: EvalContext, row: EvalRow) -> str:
        assert ctx.sandbox is not None
        return (await extract_inside(ctx.sandbox, row.base_commit, self.settings.exclude)).patch

    async def prepare_inside(self, ctx: EvalContext, row: EvalRow) -> tuple[Sandbox, dict[str, Any]]:
        """The fresh sandbox with the hidden tests in; done once per session (the scratch marker)."""
        if ctx.fresh is None:
            raise GitError("the session ran in an image but no fresh sandbox can be made for grading")
        box = await ctx.fresh()
        marker = ctx.scratch / PREPARED
        if marker.exists():
            return box, json.loads(marker.read_text())
        ctx.scratch.mkdir(parents=True, exist_ok=True)
        test_files = await patch_paths(row.test_patch, ctx.scratch) if row.test_patch.strip() else []
        applied, why = await apply_inside(box, row.test_patch, "test.diff")
        if not applied:
            raise GitError(f"the task's test_patch does not apply in the image: {why}")
        prepared = {"test_files": test_files}
        marker.write_text(json.dumps(prepared))
        return box, prepared

    # ---- steps shared with `swebench`

    @staticmethod
    def eval_dir(ctx: EvalContext) -> Path:
        return ctx.scratch / "eval"

    async def prepare(self, ctx: EvalContext, row: EvalRow) -> dict[str, Any]:
        """The evaluation copy with the hidden tests in; done once per scratch folder."""
        marker = ctx.scratch / PREPARED
        if marker.exists():
            return json.loads(marker.read_text())
        repo = ctx.repo or (Path(row.repo_path) if row.repo_path else None)
        if repo is None:
            raise GitError("no task repo: the runtime names no `repo` and the row no `repo_path`")
        ctx.scratch.mkdir(parents=True, exist_ok=True)
        dest = self.eval_dir(ctx)
        await fresh_copy(Path(repo), dest, row.base_commit)
        test_files = await patch_paths(row.test_patch, dest) if row.test_patch.strip() else []
        applied, why = await apply_patch(row.test_patch, dest)
        if not applied:
            raise GitError(f"the task's test_patch does not apply to its base_commit: {why}")
        prepared = {"test_files": test_files}
        marker.write_text(json.dumps(prepared))
        return prepared

    async def _extract(self, ctx: EvalContext, row: EvalRow) -> str:
        repo = ctx.repo or (Path(row.repo_path) if row.repo_path else None)
        extracted = await extract_patch(ctx.work, ctx.scratch, repo, row.base_commit, self.settings.exclude, ctx.home)
        return extracted.patch

    def command(self, row: EvalRow, python: str = sys.executable) -> list[str]:
        ids = row.tests
        custom = self.settings.test_command or row.test_cmd
        if custom is None:
            return [python, "-m", "pytest", "-rA", "-q", "--no-header", "-p", "no:cacheprovider", *ids]
        if isinstance(custom, str):
            quoted = shlex.join(ids)
            return ["sh", "-c", custom.replace("{tests}", quoted) if "{tests}" in custom else f"{custom} {quoted}"]
        if "{tests}" in custom:
            return [part for arg in custom for part in (ids if arg == "{tests}" else [arg])]
        return [*custom, *ids]

    def env(self, ctx: EvalContext) -> dict[str, str]:
        home = ctx.scratch / "home"
        home.mkdir(exist_ok=True)
        base = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONHASHSEED": "0",
            "COLUMNS": "400",  # pytest fits summary lines to the width: keep ids whole
        }
        return base | self.settings.env

    def cannot_run(self, done: Completed) -> str | None:
        """An infrastructure reason when the test command itself did not run, else None."""
        if done.rc is None:
            return f"the test command could not start: {done.error}"
        if done.timed_out:
            return "the test run timed out" if self.settings.timeout_is_infrastructure else None
        if done.rc in CANNOT_START_RC:
            return f"the test command could not start (rc {done.rc}): {done.err.strip()[-500:]}"
        if "No module named pytest" in done.err:
            return "pytest is not installed for the test command's python"
        return None

    async def grade(self, ctx: EvalContext, row: EvalRow, done: Completed, details: dict[str, Any]) -> Evaluation:
        statuses = parse_summary(done.out, row.tests)
        if not statuses and done.rc == 0 and not done.timed_out:
            return Evaluation.infra("the test command succeeded but printed no pytest -rA summary", **details)
        f2p = [t for t in row.FAIL_TO_PASS if statuses.get(t) in PASSING]
        p2p = [t for t in row.PASS_TO_PASS if statuses.get(t) in PASSING | {"SKIPPED"}]
        resolved = float(len(f2p) == len(row.FAIL_TO_PASS) and len(p2p) == len(row.PASS_TO_PASS))
        details |= {
            "fail_to_pass": len(f2p) / len(row.FAIL_TO_PASS),
            "pass_to_pass": len(p2p) / len(row.PASS_TO_PASS) if row.PASS_TO_PASS else 1.0,
            "tests": {t: statuses.get(t, "MISSING") for t in row.tests},
        }
        return Evaluation(reward=resolved, components={"resolved": resolved}, details=details)


# the test run in an image: the image's own PATH and HOME, these over them
_INSIDE_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0", "COLUMNS": "400"}


async def run_inside(box: Sandbox, argv: list[str], env: dict[str, str], timeout: float) -> Completed:
    rc, out, err = await box.exec(argv, env, timeout)
    return Completed(argv, rc, out, err, rc == TIMEOUT_RC, extra={"sandboxed": True})
