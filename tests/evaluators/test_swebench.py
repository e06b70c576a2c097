"""The `swebench` evaluator: local test run graded by the swebench package; a 5.x row's eval script in the
session's image; docker only with an engine."""

from __future__ import annotations

import asyncio
import shlex
import subprocess

import pytest

from nemo_polar.evaluators import EVALUATORS, EvalContext
from nemo_polar.evaluators.row import EvalRow
from nemo_polar.evaluators.swebench import InstanceContainer, engine_answers
from nemo_polar.runtimes.spec import RuntimeSpec
from nemo_polar.tasks.bundled import TASKS
from nemo_polar.tasks.check import ROOTFS_PYTHON
from nemo_polar.tasks.materialize import materialize_task, row

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
    box = InstanceContainer("docker", evaluator.test_spec(row).image, tmp_path)
    argv = box.argv(evaluator.script_argv(box, "a patch", row))
    assert argv[:5] == ["docker", "run", "--rm", "--network", "none"]
    assert f"{tmp_path}:/polar-eval:ro" in argv  # the patch and the script, handed in read-only
    assert "swebench/sweb.eval.x86_64.o_1776_r-1:latest" in argv and "git apply --verbose" in argv[-1]
    assert (tmp_path / ".polar-eval" / "agent.diff").read_text() == "a patch"
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


@pytest.mark.parametrize("script", [True, False], ids=["eval_script", "tests_steps"])
def test_a_session_in_an_image_is_graded_in_a_fresh_sandbox_of_it(tmp_path, script):
    """The agent worked in the image's /testbed; grading runs in a fresh sandbox of the same image: a 5.x
    row's own eval script after SWE-bench's patch-apply sequence (as `docker run` of its instance image
    would), or for other rows the `tests` steps there, the same steps as on this machine."""
    if not (ROOTFS_PYTHON / "bin" / "sh").exists():
        pytest.fail(f"no root filesystem at {ROOTFS_PYTHON}: run scripts/setup.sh rootfs")
    task = next(t for t in TASKS if t.name == "paginate")
    fields = row(task, materialize_task(task, tmp_path / "layer" / "testbed"))
    tests = " ".join(shlex.quote(t) for t in fields["FAIL_TO_PASS"] + fields["PASS_TO_PASS"])
    eval_script = (
        f"#!/bin/bash\ncd /testbed\ngit apply - <<'EOF_TEST'\n{fields['test_patch']}\nEOF_TEST\n"
        f"echo '>>>>> Start Test Output'\npython3 -m pytest -rA -p no:cacheprovider {tests}\n"
        "echo '>>>>> End Test Output'\n"
    )
    if script:
        fields |= {
            "version": "1.0",
            "image": "paginate:latest",
            "eval_script": eval_script,
            "eval_type": "pass_and_fail",
        }
    spec = RuntimeSpec.model_validate(
        {"kind": "image", "image": f"{tmp_path / 'layer'}:{ROOTFS_PYTHON}", "workdir": "/testbed", "network": "none"}
    )

    async def session(name: str, agent: str):
        agents, graders = spec.make(tmp_path / "runs", "agent", ""), spec.make(tmp_path / "runs", "eval", "")
        await agents.start()
        await graders.start()

        async def fresh():
            return graders

        try:
            rc, _, err = await agents.exec(["sh", "-c", agent], None, 30)
            assert rc == 0, err
            ctx = EvalContext(fields=fields, config=FAST, work=agents.work, scratch=tmp_path / name, sandbox=agents,
                              fresh=fresh)  # fmt: skip
            return await EVALUATORS.make("swebench", FAST).evaluate(ctx)
        finally:
            await agents.stop()
            await graders.stop()

    fixed = asyncio.run(
        session("fixed", "sed -i 's|return total // per_page|return -(-total // per_page)|' pager/core.py")
    )
    assert fixed.reward == 1.0 and fixed.details["in_image"] and fixed.details["resolution"] == "RESOLVED_FULL"
    assert ("Applied Patch" in fixed.details["log_tail"]) is script
    untouched = asyncio.run(session("untouched", "true"))
    assert untouched.reward == 0.0 and untouched.details["empty_patch"]
