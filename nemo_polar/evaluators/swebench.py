"""`swebench`: graded by the `swebench` package (`pip install nemo_polar[swebench]`).

Two ways to get the test log, one way to grade it (`swebench.harness.grading.get_eval_report`):

- the row's own eval script (SWE-bench 5.x rows carry `image` and `eval_script`): run after SWE-bench's
  patch-apply sequence, exactly as `docker run` would, in a fresh sandbox of the session's image (the
  session ran in docker, apptainer or image), or from this machine in a container of the row's instance
  image when a docker engine answers (`InstanceContainer`);
- otherwise the `tests` evaluator's steps — evaluation copy, hidden tests, the agent's patch, the test
  command — whose output is framed with SWE-bench's start/end/exit-code markers and parsed by the row's
  `log_parser` (default `parse_log_pytest`). Note that swebench's pytest parser splits on whitespace:
  test ids with spaces need the `tests` evaluator.

Both are one path wherever the session ran: only the box the commands run in differs (boxes.py).
reward = components["resolved"] (swebench's FULL resolution); swebench's F2P/P2P fractions go to details.
"""

from __future__ import annotations

import shlex
import shutil
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from ..errors import EvaluationError
from ..sandbox import run_group
from .base import Completed, EvalContext, Evaluation, Sandbox
from .boxes import hand_in, run_in
from .patch import read_patch
from .row import EvalRow
from .tests import TestsConfig, TestsEvaluator

ENGINE_PROBE_TIMEOUT_S = 10.0
DOCKER_FAILED_RC = 125  # `docker run` itself failed (no image, no daemon), not the command in it
# SWE-bench's own fallbacks, in its order (swebench.harness.run_evaluation.GIT_APPLY_CMDS).
APPLY_CMDS = (
    "git apply --verbose",
    "git apply --verbose --3way",
    "git apply --verbose --reject",
    "patch --batch --forward --fuzz=5 -p1 -i",
)


class SwebenchConfig(TestsConfig):
    mode: Literal["auto", "local", "docker"] = Field(
        "auto", description="auto: docker when the row has `image` + `eval_script` and an engine answers"
    )
    log_parser: str | None = Field(None, description="a key of swebench's PARSER_REGISTRY (default: the row's)")
    docker: str = Field("docker", description="the engine's CLI")


class SwebenchEvaluator(TestsEvaluator):
    name = "swebench"
    Settings = SwebenchConfig

    async def prewarm(self, ctx: EvalContext) -> None:
        row = EvalRow.parse(ctx.fields)
        if _has_script(row) and ctx.fresh is not None:
            await ctx.fresh()  # the eval script applies the hidden tests itself
        else:
            await super().prewarm(ctx)

    async def evaluate(self, ctx: EvalContext) -> Evaluation:
        _swebench()  # fail here, with the install hint, rather than after the tests ran
        row = EvalRow.parse(ctx.fields)
        started = time.monotonic()
        try:
            box = await self.script_box(ctx, row)
        except (EvaluationError, OSError) as exc:
            return Evaluation.infra(str(exc))
        if box is None:
            return await super().evaluate(ctx)  # the `tests` steps, their log graded by swebench (`grade`)
        return await self.run_script(ctx, row, box, started)

    async def script_box(self, ctx: EvalContext, row: EvalRow) -> Sandbox | None:
        """Where the row's own eval script runs: a fresh sandbox of the session's image, or from this machine
        a container of its instance image when an engine answers; None: the `tests` steps grade it."""
        if ctx.sandbox is not None:
            return await self.eval_copy(ctx, row, copy=False) if _has_script(row) else None
        if self.settings.mode != "local" and _has_script(row) and await engine_answers(self.settings.docker):
            return InstanceContainer(self.settings.docker, self.test_spec(row).image, ctx.scratch / "container")
        if self.settings.mode == "docker":
            raise EvaluationError(f"mode docker: no engine answers to `{self.settings.docker} version`")
        return None

    async def run_script(self, ctx: EvalContext, row: EvalRow, box: Sandbox, started: float) -> Evaluation:
        """The agent's patch applied as SWE-bench applies it, then the row's eval script, in `box`."""
        try:
            patch = await read_patch(ctx, row, self.settings.exclude)
        except (EvaluationError, OSError) as exc:
            return Evaluation.infra(str(exc))
        details: dict[str, Any] = {"patch_bytes": len(patch.encode()), "in_image": ctx.sandbox is not None}
        if not patch.strip() and not self.settings.run_empty:
            return Evaluation(reward=0.0, components={"resolved": 0.0}, details=details | {"empty_patch": True})
        argv = self.script_argv(box, patch, row)
        budget = max(1.0, min(self.settings.timeout_s, ctx.timeout_s - (time.monotonic() - started)))
        done = await run_in(box, argv, self.settings.env, budget)
        details |= {"command": shlex.join(argv), "test_rc": done.rc, "test_timed_out": done.timed_out}
        details["log_tail"] = (done.out + done.err)[-4000:]
        if done.rc is None:
            return Evaluation.infra(f"the eval script could not run: {done.error}", **details)
        if done.timed_out and self.settings.timeout_is_infrastructure:
            return Evaluation.infra("the test run timed out", **details)
        return self._report(ctx, row, done.out + done.err, details)

    def script_argv(self, box: Sandbox, patch: str, row: EvalRow) -> list[str]:
        """SWE-bench's patch-apply sequence in `box`'s working copy, then the row's eval script."""
        patch_in = hand_in(box, "agent.diff", patch)
        script_in = hand_in(box, "eval.sh", self.test_spec(row).eval_script)
        return ["/bin/bash", "-c", apply_then(box.inside_work, patch_in, script_in)]

    async def grade(self, ctx: EvalContext, row: EvalRow, done: Completed, details: dict[str, Any]) -> Evaluation:
        _, constants = _swebench()
        log = (
            f"{constants.APPLY_PATCH_PASS}\n{constants.START_TEST_OUTPUT}\n{done.out}\n{done.err}\n"
            f"{constants.END_TEST_OUTPUT}\n{constants.TEST_EXIT_CODE}: {done.rc}\n"
        )
        return self._report(ctx, row, log, details)

    def _report(self, ctx: EvalContext, row: EvalRow, log: str, details: dict[str, Any]) -> Evaluation:
        grading, _ = _swebench()
        ctx.scratch.mkdir(parents=True, exist_ok=True)
        log_path = ctx.scratch / "test_output.txt"
        log_path.write_text(log)
        spec = self.test_spec(row)
        prediction = {"instance_id": spec.instance_id, "model_name_or_path": "polar", "model_patch": "(applied)"}
        report = grading.get_eval_report(spec, prediction, str(log_path), include_tests_status=True)[spec.instance_id]
        tests = report.get("tests_status")
        if report.get("infra_failure"):
            return Evaluation.infra(f"swebench: {report.get('infra_failure_reason')}", report=report, **details)
        resolved = float(bool(report["resolved"]))
        if tests is not None:
            details |= {
                "fail_to_pass": grading.compute_fail_to_pass(tests),
                "pass_to_pass": grading.compute_pass_to_pass(tests),
                "resolution": grading.get_resolution_status(tests),
            }
        return Evaluation(reward=resolved, components={"resolved": resolved}, details=details | {"report": report})

    def test_spec(self, row: EvalRow):
        """swebench's TestSpec: built by swebench from a 5.x row (image + eval_script), else the local one."""
        from swebench.types import TestSpec

        extra = row.model_extra or {}
        parser = self.settings.log_parser or extra.get("log_parser") or "parse_log_pytest"
        if extra.get("image") and extra.get("eval_script"):
            from swebench.harness.utils import make_test_spec

            return make_test_spec(row.model_dump() | {"log_parser": parser})
        return TestSpec(
            instance_id=row.instance_id or "local",
            image="",
            eval_script_list=[],
            repo=row.repo,
            version=str(extra.get("version", "")),
            FAIL_TO_PASS=row.FAIL_TO_PASS,
            PASS_TO_PASS=row.PASS_TO_PASS,
            log_parser=parser,
            eval_type=extra.get("eval_type") or "pass_and_fail",
        )


class InstanceContainer:
    """A SWE-bench instance image as a `Sandbox`, SWE-bench's own way: each command in a container of its
    own (`docker run --rm`, no network) in /testbed, the files handed in mounted read-only."""

    inside_work, inside_home = Path("/testbed"), Path("/polar-eval")
    sandboxed = True

    def __init__(self, docker: str, image: str, home: Path) -> None:
        self.docker, self.image, self.home = docker, image, home

    def argv(self, argv: list[str], env: dict[str, str] | None = None) -> list[str]:
        """The full command line of one command."""
        mount = ["-v", f"{self.home}:{self.inside_home}:ro"]
        variables = [part for key, value in (env or {}).items() for part in ("-e", f"{key}={value}")]
        run = [self.docker, "run", "--rm", "--network", "none", *mount, *variables, "-w", str(self.inside_work)]
        return [*run, self.image, *argv]

    async def exec(
        self, argv: list[str], env: dict[str, str] | None = None, timeout: float | None = None
    ) -> tuple[int, str, str]:
        self.home.mkdir(parents=True, exist_ok=True)
        rc, out, err = await run_group(self.argv(argv, env), None, self.home, timeout)
        if rc == DOCKER_FAILED_RC:
            raise OSError(f"docker run failed: {err.strip()[-500:]}")
        return rc, out, err


def apply_then(workdir: str | Path, patch: str | Path, script: str | Path) -> str:
    """A shell line: SWE-bench's patch-apply sequence in `workdir`, then its eval script."""
    tries = " || ".join(f"{cmd} {patch}" for cmd in APPLY_CMDS)
    return (
        f"cd {workdir} && if ! ( {tries} ); then echo '>>>>> Patch Apply Failed'; exit 0; fi;"
        f" echo '>>>>> Applied Patch'; /bin/bash {script}"
    )


def _has_script(row: EvalRow) -> bool:
    extra = row.model_extra or {}
    return bool(extra.get("image") and extra.get("eval_script"))


async def engine_answers(docker: str = "docker") -> bool:
    """True when a container engine answers (the CLI exists and its server replies)."""
    if shutil.which(docker) is None:
        return False
    try:
        rc, out, _ = await run_group([docker, "version", "--format", "{{.Server.Version}}"], None, Path("/"),
                                     ENGINE_PROBE_TIMEOUT_S)  # fmt: skip
    except OSError:
        return False
    return rc == 0 and bool(out.strip())


def _swebench():
    try:
        from swebench.harness import constants, grading
    except ImportError as exc:
        raise ImportError("the swebench evaluator needs `pip install nemo_polar[swebench]`") from exc
    return grading, constants
