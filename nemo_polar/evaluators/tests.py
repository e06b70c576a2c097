"""`tests`: the SWE-bench recipe: the agent's patch under the task's hidden tests, graded from pytest.

prepare:  the evaluation copy at `base_commit` with the task's hidden `test_patch` applied — a fresh
          sandbox of the session's image (`ctx.fresh()`, its `eval_prepare` done), or on this machine a
          fresh copy of the task repo; made once, by `prewarm` while the agent runs, else by `evaluate`.
evaluate: the agent's patch (its working copy vs `base_commit`, junk dropped, read where it is) applied
          on that copy, its changes to the test surface left out (surface.py: the files `test_patch` owns,
          as SWE-bench resets them, the runner's configuration, start-up hooks, modules that shadow the
          interpreter's, the task's own test files; `details.left_out` says which), then the
          FAIL_TO_PASS + PASS_TO_PASS tests, graded from pytest's `-rA` summary, with the guard
          (inside/polar_pytest_guard.py) loaded first: a run the code under test took over pays nothing.

The steps are the same wherever the session ran; only the box they run in differs (boxes.py): on this
machine, the copy under bubblewrap (`sandbox`: only the copy and its HOME writable, no network). Unless
the row or config names a test command, the tests run with `python3 -m pytest` in an image, with this
Python on this machine.

reward = components["resolved"] = 1.0 only when every FAIL_TO_PASS test passes and every PASS_TO_PASS
test passes (or is skipped), and the guard saw them pass and nothing take over the runner; the fractions
are in `details`, what the guard found in `details.tampered`. A test run that hits its timeout scores 0
(the agent's code may hang); set `timeout_is_infrastructure` to mask it instead.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import Field

from ..config import Strict
from ..errors import EvaluationError, GitError
from .base import Completed, EvalContext, Evaluation, Evaluator, Sandbox
from .boxes import FILES, HostBox, run_in
from .patch import apply_patch, fresh_copy, patch_paths, read_patch
from .pytest_log import PASSING, parse_summary
from .row import EvalRow
from .surface import surface_changes, surface_of

CANNOT_START_RC = (126, 127)  # the shell's "not executable" / "not found"
PREPARED = "prepared.json"
TEST_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0", "COLUMNS": "400"}  # COLUMNS: ids kept whole
GUARD = Path(__file__).parent / "inside" / "polar_pytest_guard.py"
GUARD_STATE = "guard.jsonl"


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
    timeout_is_infrastructure: bool = Field(
        False,
        description="a test run past its timeout masks the session (the sandbox's fault) instead of scoring 0 (the "
        "agent's code hung)",
    )
    surface: bool = Field(
        True,
        description="leave the agent's changes to the test surface out of its patch (surface.py); false applies "
        "the whole patch but the hidden tests' files, as SWE-bench's harness does (to compare with its numbers)",
    )
    guard: bool = Field(
        True,
        description="load the guard into pytest and pay nothing for a run the code under test took over; false "
        "for a test command that does not run pytest, or runs it without the environment it was given",
    )


class TestsEvaluator(Evaluator):
    __test__ = False
    name = "tests"
    Settings = TestsConfig

    async def prewarm(self, ctx: EvalContext) -> None:
        await self.prepare(ctx, EvalRow.parse(ctx.fields))

    async def evaluate(self, ctx: EvalContext) -> Evaluation:
        row = EvalRow.parse(ctx.fields)
        started = time.monotonic()
        try:
            box, prepared = await self.prepare(ctx, row)
            test_files = prepared["test_files"]
            patch = await read_patch(ctx, row, self.settings.exclude)
        except (EvaluationError, OSError) as exc:
            return Evaluation.infra(str(exc))
        details: dict[str, Any] = {"patch_bytes": len(patch.encode()), "test_files": test_files}
        details["in_image"] = ctx.sandbox is not None
        if not patch.strip() and not self.settings.run_empty:
            return Evaluation(reward=0.0, components={"resolved": 0.0}, details=details | {"empty_patch": True})
        try:
            surface = prepared["surface"] if self.settings.surface else None
            left_out = await surface_changes(box, patch, test_files, surface) if surface else {}
            applied, why = await apply_patch(box, patch, "agent.diff", exclude=[*test_files, *left_out])
        except GitError as exc:
            return Evaluation.infra(str(exc), **details)
        details["left_out"] = left_out
        if not applied:
            return Evaluation(reward=0.0, components={"resolved": 0.0}, details=details | {"apply_error": why})
        budget = max(1.0, min(self.settings.timeout_s, ctx.timeout_s - (time.monotonic() - started)))
        env = TEST_ENV | self.settings.env
        env |= self.guard(box, env) if self.settings.guard else {}
        done = await run_in(box, self.command(row, ctx), env, budget)
        details |= {
            "sandboxed": done.extra.get("sandboxed", False),
            "test_rc": done.rc,
            "test_timed_out": done.timed_out,
            "log_tail": (done.out + done.err)[-4000:],
        }
        records = self.guard_records(box) if self.settings.guard else []
        if (problem := self.cannot_run(done, ran=any("started" in r for r in records))) is not None:
            return Evaluation.infra(problem, **details)
        if self.settings.guard and not done.timed_out:
            guarded = self.guarded(records, done, row)
            if isinstance(guarded, str):
                return Evaluation.infra(guarded, **details)
            if guarded:
                return Evaluation(reward=0.0, components={"resolved": 0.0}, details=details | {"tampered": guarded})
        return await self.grade(ctx, row, done, details)

    def guard(self, box: Sandbox, env: dict[str, str]) -> dict[str, str]:
        """The guard handed into `box`, and the variables that load it into pytest first (ahead of `env`'s)."""
        folder = box.home / FILES / "guard"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / GUARD.name).write_text(GUARD.read_text())
        (box.home / FILES / GUARD_STATE).unlink(missing_ok=True)
        inside = box.inside_home / FILES
        ahead = {"PYTHONPATH": (str(inside / "guard"), ":"), "PYTEST_ADDOPTS": (f"-p {GUARD.stem}", " ")}
        out = {key: sep.join(filter(None, (first, env.get(key)))) for key, (first, sep) in ahead.items()}
        return out | {"POLAR_GUARD": str(inside / GUARD_STATE)}

    def guard_records(self, box: Sandbox) -> list[dict[str, Any]]:
        """What the guard wrote: its start, then what it found when pytest finished."""
        try:
            return [json.loads(line) for line in (box.home / FILES / GUARD_STATE).read_text().splitlines()]
        except (OSError, ValueError):
            return []

    def guarded(self, records: list[dict[str, Any]], done: Completed, row: EvalRow) -> list[str] | str:
        """What the guard found wrong with the run (nothing: []), or why the run cannot be judged (masked)."""
        statuses = parse_summary(done.out, row.tests)
        if not any("started" in r for r in records):
            if GUARD.stem in done.out + done.err:
                return f"the guard did not load into pytest: {(done.out + done.err).strip()[-500:]}"
            if statuses:
                return "pytest ran without the guard (set the evaluator's guard: false for such a test command)"
            return []  # pytest never started: `grade` says why
        last = next((r for r in reversed(records) if r.get("finished")), None)
        if last is None:
            return ["the test run ended before pytest did (the code under test ended the process)"]
        seen = last.get("outcomes") or {}
        found = list(last.get("tampered") or [])
        if not statuses and any(test in seen for test in row.tests):
            found.append(f"pytest's summary is missing; the guard saw {len(seen)} tests run")
        for test, status in statuses.items():
            expected = "skipped" if status == "SKIPPED" else "passed"
            if (status in PASSING or status == "SKIPPED") and seen.get(test) != expected:
                found.append(f"the summary says {test} {status}; the guard saw {seen.get(test, 'nothing')}")
        return found

    async def prepare(self, ctx: EvalContext, row: EvalRow) -> tuple[Sandbox, dict[str, Any]]:
        """The evaluation copy with the hidden tests in; what it knows of them (`test_files`, the files they own;
        `surface`, what the agent's patch is judged against: surface.py). Made once per session, while the agent
        runs where the gateway can (`prewarm`)."""
        async with ctx.preparing:
            return await self._prepare(ctx, row)

    async def _prepare(self, ctx: EvalContext, row: EvalRow) -> tuple[Sandbox, dict[str, Any]]:
        marker = ctx.scratch / PREPARED
        if marker.exists():
            return await self.eval_copy(ctx, row, copy=False), json.loads(marker.read_text())
        ctx.scratch.mkdir(parents=True, exist_ok=True)
        box = await self.eval_copy(ctx, row, copy=True)
        test_files = await patch_paths(box, row.test_patch)
        applied, why = await apply_patch(box, row.test_patch, "test.diff")
        if not applied:
            raise GitError(f"the task's test_patch does not apply to its base_commit: {why}")
        prepared = {"test_files": test_files, "surface": await surface_of(box, test_files, self.python(ctx))}
        marker.write_text(json.dumps(prepared))
        return box, prepared

    async def eval_copy(self, ctx: EvalContext, row: EvalRow, copy: bool) -> Sandbox:
        """Where the tests run: a fresh sandbox of the session's image (the gateway starts it once), else a
        folder on this machine, copied from the task repo when `copy`."""
        if ctx.sandbox is not None:
            if ctx.fresh is None:
                raise EvaluationError("the session ran in an image but no fresh sandbox can be made for grading")
            return await ctx.fresh()
        box = HostBox(ctx.scratch / "eval", ctx.scratch / "home", sandbox=self.settings.sandbox)
        if copy:
            repo = row.task_repo(ctx.repo)
            if repo is None:
                raise EvaluationError("no task repo: the runtime names no `repo` and the row no `repo_path`")
            await fresh_copy(repo, box, row.base_commit)
        return box

    def python(self, ctx: EvalContext) -> str:
        """The tests' Python: the image's own, else this one."""
        return "python3" if ctx.sandbox is not None else sys.executable

    def command(self, row: EvalRow, ctx: EvalContext) -> list[str]:
        ids = row.tests
        custom = self.settings.test_command or row.test_cmd
        if custom is None:
            return [self.python(ctx), "-m", "pytest", "-rA", "-q", "--no-header", "-p", "no:cacheprovider", *ids]
        if isinstance(custom, str):
            quoted = shlex.join(ids)
            return ["sh", "-c", custom.replace("{tests}", quoted) if "{tests}" in custom else f"{custom} {quoted}"]
        if "{tests}" in custom:
            return [part for arg in custom for part in (ids if arg == "{tests}" else [arg])]
        return [*custom, *ids]

    def cannot_run(self, done: Completed, ran: bool = False) -> str | None:
        """An infrastructure reason when the test command itself did not run, else None. `ran`: the guard saw
        pytest start, so what the code under test printed or exited with says nothing of the command."""
        if done.rc is None:
            return f"the test command could not start: {done.error}"
        if done.timed_out:
            return "the test run timed out" if self.settings.timeout_is_infrastructure else None
        if ran:
            return None
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
