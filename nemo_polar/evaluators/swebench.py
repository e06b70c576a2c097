"""`swebench`: graded by the `swebench` package (`pip install nemo_polar[swebench]`).

Two ways to get the test log, one way to grade it (`swebench.harness.grading.get_eval_report`):

- local (default; what runs without a container engine): the `tests` evaluator's steps — fresh copy,
  hidden tests, the agent's patch, the test command — then the output is framed with SWE-bench's
  start/end/exit-code markers and parsed by the row's `log_parser` (default `parse_log_pytest`).
  Note that swebench's pytest parser splits on whitespace: test ids with spaces need the `tests`
  evaluator.
- docker: for SWE-bench 5.x rows that carry `image` and `eval_script`, when a docker engine answers:
  the instance image runs SWE-bench's patch-apply sequence and the instance's eval script.

- in the session's image (the session ran in docker, apptainer or image): a 5.x row's eval script runs
  in a fresh sandbox of the same image after SWE-bench's patch-apply sequence, exactly as `docker run`
  would; other rows take the `tests` steps in that sandbox, graded as above.

reward = components["resolved"] (swebench's FULL resolution); swebench's F2P/P2P fractions go to details.
"""

from __future__ import annotations

import shlex
import shutil
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from ..errors import GitError
from ..sandbox import TIMEOUT_RC
from .base import Completed, EvalContext, Evaluation, run
from .inside import hand_in
from .row import EvalRow
from .tests import TestsConfig, TestsEvaluator

CONTAINER_PATCH = "/tmp/polar_patch.diff"
ENGINE_PROBE_TIMEOUT_S = 10.0
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
        if ctx.sandbox is not None and _has_script(row) and ctx.fresh is not None:
            await ctx.fresh()  # the eval script applies the hidden tests itself
        else:
            await super().prewarm(ctx)

    async def evaluate(self, ctx: EvalContext) -> Evaluation:
        _swebench()  # fail here, with the install hint, rather than after the tests ran
        row = EvalRow.parse(ctx.fields)
        if ctx.sandbox is not None:
            return await (self._evaluate_script_inside(ctx, row) if _has_script(row) else super().evaluate(ctx))
        if await self._use_docker(row):
            return await self._evaluate_docker(ctx, row)
        if self.settings.mode == "docker":
            return Evaluation.infra(f"mode docker: no engine answers to `{self.settings.docker} version`")
        return await super().evaluate(ctx)

    async def grade(self, ctx: EvalContext, row: EvalRow, done: Completed, details: dict[str, Any]) -> Evaluation:
        _, constants = _swebench()
        log = (
            f"{constants.APPLY_PATCH_PASS}\n{constants.START_TEST_OUTPUT}\n{done.out}\n{done.err}\n"
            f"{constants.END_TEST_OUTPUT}\n{constants.TEST_EXIT_CODE}: {done.rc}\n"
        )
        return self._report(ctx, row, log, details)

    def _report(self, ctx: EvalContext, row: EvalRow, log: str, details: dict[str, Any]) -> Evaluation:
        grading, _ = _swebench()
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

    # ---- the eval script, in the session's image

    async def _evaluate_script_inside(self, ctx: EvalContext, row: EvalRow) -> Evaluation:
        started = time.monotonic()
        try:
            patch = ctx.patch if ctx.patch is not None else await self.extract_inside(ctx, row)
            if ctx.fresh is None:
                raise GitError("the session ran in an image but no fresh sandbox can be made for grading")
            details: dict[str, Any] = {"patch_bytes": len(patch.encode()), "mode": "image"}
            if not patch.strip() and not self.settings.run_empty:
                return Evaluation(reward=0.0, components={"resolved": 0.0}, details=details | {"empty_patch": True})
            box = await ctx.fresh()
        except (GitError, OSError) as exc:
            return Evaluation.infra(str(exc))
        patch_in = hand_in(box, "agent.diff", patch)
        script_in = hand_in(box, "eval.sh", self.test_spec(row).eval_script)
        argv = ["/bin/bash", "-c", apply_then(box.inside_work, patch_in, script_in)]
        budget = max(1.0, min(self.settings.timeout_s, ctx.timeout_s - (time.monotonic() - started)))
        rc, out, err = await box.exec(argv, self.settings.env, budget)
        details |= {"test_rc": rc, "test_timed_out": rc == TIMEOUT_RC, "log_tail": (out + err)[-4000:]}
        if rc == TIMEOUT_RC and self.settings.timeout_is_infrastructure:
            return Evaluation.infra("the test run timed out", **details)
        return self._report(ctx, row, out + err, details)

    # ---- docker

    async def _use_docker(self, row: EvalRow) -> bool:
        extra = row.model_extra or {}
        if self.settings.mode == "local" or not (extra.get("image") and extra.get("eval_script")):
            return False
        return await engine_answers(self.settings.docker)

    def docker_argv(self, row: EvalRow, patch_file: Path, eval_file: Path) -> list[str]:
        """One `docker run` of the instance image: apply the patch like SWE-bench, then its eval script."""
        spec = self.test_spec(row)
        script = apply_then("/testbed", CONTAINER_PATCH, "/eval.sh")
        mounts = ["-v", f"{patch_file}:{CONTAINER_PATCH}:ro", "-v", f"{eval_file}:/eval.sh:ro"]
        return [
            self.settings.docker,
            "run",
            "--rm",
            "--network",
            "none",
            *mounts,
            spec.image,
            "/bin/bash",
            "-c",
            script,
        ]

    async def _evaluate_docker(self, ctx: EvalContext, row: EvalRow) -> Evaluation:
        ctx.scratch.mkdir(parents=True, exist_ok=True)
        patch = ctx.patch if ctx.patch is not None else await self._extract(ctx, row)
        details: dict[str, Any] = {"patch_bytes": len(patch.encode()), "mode": "docker"}
        if not patch.strip() and not self.settings.run_empty:
            return Evaluation(reward=0.0, components={"resolved": 0.0}, details=details | {"empty_patch": True})
        patch_file, eval_file = ctx.scratch / "patch.diff", ctx.scratch / "eval.sh"
        patch_file.write_text(patch)
        eval_file.write_text(self.test_spec(row).eval_script)
        argv = self.docker_argv(row, patch_file, eval_file)
        done = await run(argv, ctx.scratch, None, min(self.settings.timeout_s, ctx.timeout_s))
        details |= {"command": shlex.join(argv), "test_rc": done.rc, "log_tail": (done.out + done.err)[-4000:]}
        if done.rc is None or done.rc == 125:  # 125: docker itself failed (no image, no daemon)
            return Evaluation.infra(f"docker run failed: {done.error or done.err.strip()[-500:]}", **details)
        if done.timed_out and self.settings.timeout_is_infrastructure:
            return Evaluation.infra("the test run timed out", **details)
        return self._report(ctx, row, done.out + done.err, details)


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
    probe = await run([docker, "version", "--format", "{{.Server.Version}}"], Path("/"), None, ENGINE_PROBE_TIMEOUT_S)
    return probe.ok and bool(probe.out.strip())


def _swebench():
    try:
        from swebench.harness import constants, grading
    except ImportError as exc:
        raise ImportError("the swebench evaluator needs `pip install nemo_polar[swebench]`") from exc
    return grading, constants
