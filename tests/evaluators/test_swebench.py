"""The `swebench` evaluator: local test run graded by the swebench package; docker only with an engine."""

from __future__ import annotations

import asyncio
import subprocess

import pytest

from nemo_polar.evaluators import EVALUATORS, EvalContext
from nemo_polar.evaluators.row import EvalRow
from nemo_polar.evaluators.swebench import engine_answers

pytest.importorskip("swebench", reason="the swebench extra is not installed")

FAST = {"env": {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}, "mode": "local"}


def _evaluate(row, pristine, work, tmp_path, config=FAST):
    evaluator = EVALUATORS.make("swebench", config)
    ctx = EvalContext(fields=row, config=config, work=work, scratch=tmp_path / "scratch", repo=pristine)
    return asyncio.run(evaluator.evaluate(ctx))


@pytest.mark.parametrize("name", ["paginate", "duration"])
def test_reference_fix_resolves(task_copy, tmp_path, name):
    task, row, pristine, work = task_copy(name)
    subprocess.run(["git", "apply", "-"], cwd=work, input=task.patch, text=True, check=True)
    result = _evaluate(row, pristine, work, tmp_path)
    assert result.reward == 1.0 and result.components == {"resolved": 1.0}
    assert result.details["resolution"] == "RESOLVED_FULL" and result.details["report"]["resolved"] is True


def test_wrong_fix_is_not_resolved(task_copy, tmp_path):
    task, row, pristine, work = task_copy("paginate")
    subprocess.run(["git", "apply", "-"], cwd=work, input=task.wrong_patch, text=True, check=True)
    result = _evaluate(row, pristine, work, tmp_path)
    assert result.reward == 0.0 and result.infrastructure_error is None
    assert result.details["fail_to_pass"] == 1.0 and result.details["pass_to_pass"] < 1.0


def test_no_change_is_not_resolved(task_copy, tmp_path):
    _, row, pristine, work = task_copy("semver")
    result = _evaluate(row, pristine, work, tmp_path, config=FAST | {"run_empty": True})
    assert result.reward == 0.0 and result.details["resolution"] == "RESOLVED_NO"


def test_docker_command_for_a_swebench_5_row(tmp_path):
    row = EvalRow.parse(
        {
            "instance_id": "o__r-1",
            "repo": "o/r",
            "version": "1.0",
            "image": "swebench/sweb.eval.x86_64.o_1776_r-1:latest",
            "eval_script": "#!/bin/bash\nset -uxo pipefail\n"
            "echo '>>>>> Start Test Output'\npytest -rA\necho '>>>>> End Test Output'",
            "log_parser": "parse_log_pytest",
            "eval_type": "pass_and_fail",
            "FAIL_TO_PASS": '["t.py::a"]',
            "PASS_TO_PASS": "[]",
        }
    )
    evaluator = EVALUATORS.make("swebench")
    argv = evaluator.docker_argv(row, tmp_path / "p.diff", tmp_path / "eval.sh")
    assert argv[:5] == ["docker", "run", "--rm", "--network", "none"]
    assert "swebench/sweb.eval.x86_64.o_1776_r-1:latest" in argv and "git apply --verbose" in argv[-1]
    assert "Test Exit Code" in evaluator.test_spec(row).eval_script  # swebench's own spec records the exit code


def test_mode_docker_without_an_engine_is_masked(task_copy, tmp_path):
    if asyncio.run(engine_answers()):
        pytest.skip("a docker engine answers here; this checks the no-engine path")
    _, row, pristine, work = task_copy("paginate")
    result = _evaluate(row, pristine, work, tmp_path, config={"mode": "docker"})
    assert result.reward is None and "no engine" in result.infrastructure_error


def test_docker_run_on_an_engine():
    if not asyncio.run(engine_answers()):
        pytest.skip("no docker engine answers on this machine: the docker path is not exercised")
    pytest.skip("needs a SWE-bench instance image pulled locally")
