"""The `tests` evaluator on bundled tasks, as the gateway calls it."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from nemo_polar.contracts import EvaluatorSpec
from nemo_polar.errors import ConfigError
from nemo_polar.evaluators import EVALUATORS, EvalContext

FAST = {"env": {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}}


def _apply(patch: str, work) -> None:
    subprocess.run(["git", "apply", "-"], cwd=work, input=patch, text=True, check=True)


def _evaluate(row, pristine, work, tmp_path, config=FAST, kind="tests", **ctx):
    evaluator = EVALUATORS.make(kind, config)
    context = EvalContext(fields=row, config=config, work=work, scratch=tmp_path / "scratch", repo=pristine, **ctx)
    return asyncio.run(evaluator.evaluate(context))


def test_reference_fix_scores_one_with_prewarm(task_copy, tmp_path):
    task, row, pristine, work = task_copy("slugify")  # test ids with spaces and " - " in brackets
    _apply(task.patch, work)
    evaluator = EVALUATORS.make("tests", FAST)
    ctx = EvalContext(fields=row, config=FAST, work=work, scratch=tmp_path / "scratch", repo=pristine)
    asyncio.run(evaluator.prewarm(ctx))
    assert (ctx.scratch / "eval" / "tests" / "test_slug.py").read_text().count("test_separators_collapse") == 1
    result = asyncio.run(evaluator.evaluate(ctx))
    assert result.reward == 1.0 and result.components == {"resolved": 1.0} and result.infrastructure_error is None
    assert set(result.details["tests"].values()) == {"PASSED"} and result.details["fail_to_pass"] == 1.0
    assert result.details["patch_bytes"] > 0


def test_no_change_scores_zero_without_running(task_copy, tmp_path):
    _, row, pristine, work = task_copy("paginate")
    result = _evaluate(row, pristine, work, tmp_path)
    assert result.reward == 0.0 and result.details["empty_patch"] and "tests" not in result.details


def test_no_change_with_run_empty_runs_the_failing_tests(task_copy, tmp_path):
    task, row, pristine, work = task_copy("paginate")
    result = _evaluate(row, pristine, work, tmp_path, config=FAST | {"run_empty": True})
    assert result.reward == 0.0
    assert result.details["fail_to_pass"] == 0.0 and result.details["pass_to_pass"] == 1.0


def test_wrong_fix_scores_zero(task_copy, tmp_path):
    task, row, pristine, work = task_copy("paginate")
    _apply(task.wrong_patch, work)
    result = _evaluate(row, pristine, work, tmp_path)
    assert result.reward == 0.0 and result.infrastructure_error is None
    assert result.details["tests"]["tests/test_core.py::test_exact_multiple"] == "FAILED"  # the fix broke P2P


def test_agent_edits_to_hidden_test_files_are_overridden(task_copy, tmp_path):
    task, row, pristine, work = task_copy("semver")
    _apply(task.patch, work)
    (work / "tests" / "test_compare.py").write_text("def test_equal():\n    assert False\n")
    result = _evaluate(row, pristine, work, tmp_path)
    assert result.reward == 1.0 and result.details["test_files"] == ["tests/test_compare.py"]


def test_a_patch_that_does_not_apply_scores_zero_unmasked(task_copy, tmp_path):
    _, row, pristine, work = task_copy("roman")
    bad = "diff --git a/numerals/roman.py b/numerals/roman.py\n--- a/numerals/roman.py\n+++ b/numerals/roman.py\n"
    bad += "@@ -1,2 +1,2 @@\n-this line is not in the file\n+nor is this\n context\n"
    result = _evaluate(row, pristine, work, tmp_path, patch=bad)
    assert result.reward == 0.0 and result.infrastructure_error is None and "apply_error" in result.details


def test_a_broken_test_command_is_masked(task_copy, tmp_path):
    task, row, pristine, work = task_copy("roman")
    _apply(task.patch, work)
    result = _evaluate(row | {"test_cmd": "/nonexistent/python -m pytest -rA"}, pristine, work, tmp_path)
    assert result.reward is None and "could not start" in result.infrastructure_error
    argv = _evaluate(row, pristine, work, tmp_path / "b", config=FAST | {"test_command": ["/nonexistent/py"]})
    assert argv.reward is None and "could not start" in argv.infrastructure_error


def test_a_missing_repo_is_masked(task_copy, tmp_path):
    task, row, _, work = task_copy("roman")
    _apply(task.patch, work)
    result = _evaluate(row, tmp_path / "gone", work, tmp_path)
    assert result.reward is None and "missing" in result.infrastructure_error


def test_a_hanging_test_run_scores_zero_or_masks_as_configured(task_copy, tmp_path):
    _, row, pristine, work = task_copy("roman")
    hang = {"test_cmd": "sleep 30 # {tests}", "FAIL_TO_PASS": ["t.py::x"]}
    config = FAST | {"timeout_s": 0.5, "run_empty": True}
    result = _evaluate(row | hang, pristine, work, tmp_path, config=config)
    assert result.reward == 0.0 and result.details["test_timed_out"]
    config |= {"timeout_is_infrastructure": True}
    masked = _evaluate(row | hang, pristine, work, tmp_path / "b", config=config)
    assert masked.reward is None and "timed out" in masked.infrastructure_error


def test_bad_inputs_name_the_key(task_copy, tmp_path):
    _, row, pristine, work = task_copy("roman")
    without = {k: v for k, v in row.items() if k != "FAIL_TO_PASS"}
    with pytest.raises(ConfigError, match="FAIL_TO_PASS"):
        _evaluate(without, pristine, work, tmp_path)
    with pytest.raises(ConfigError, match="PASS_TO_PASS"):
        _evaluate(row | {"PASS_TO_PASS": "[not json"}, pristine, work, tmp_path)
    for bad, key in (
        ({"kind": "nope"}, "unknown evaluator 'nope'"),
        ({"kind": "tests", "config": {"timeout_s": -1}}, "timeout_s"),
        ({"kind": "tests", "config": {"tmeout": 1}}, "tmeout"),
    ):
        with pytest.raises(ValidationError, match=key):  # refused when the task is validated (submitted)
            EvaluatorSpec.model_validate(bad)
        with pytest.raises(ConfigError, match=key):  # and by the node that would run it
            spec = EvaluatorSpec.model_construct(**({"config": {}} | bad))
            EVALUATORS.make(spec.kind, spec.config)


def test_session_completed():
    evaluator = EVALUATORS.make("session_completed")
    from nemo_polar.states import SessionState

    def score(status, rc):
        ctx = EvalContext(fields={}, config={}, work=None, scratch=None, exit_code=rc, status=status)
        return asyncio.run(evaluator.evaluate(ctx)).reward

    assert score(SessionState.COMPLETED, 0) == 1.0
    assert score(SessionState.COMPLETED, 1) == 0.0 and score(SessionState.TIMEOUT, 0) == 0.0


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
def test_the_agents_code_runs_sandboxed_under_its_tests(task_copy, tmp_path):
    """The agent's patch adds a conftest.py that tries to escape while the tests run: it may write
    nowhere but the evaluation copy and reach no network; the grade is unaffected."""
    task, row, pristine, work = task_copy("roman")
    _apply(task.patch, work)
    escaped, listener = tmp_path / "escaped", socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    (work / "conftest.py").write_text(
        "import socket\n"
        f"try:\n    open({str(escaped)!r}, 'w').write('out')\nexcept OSError:\n    pass\n"
        f"try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
        f"    open({str(escaped)!r} + '.net', 'w').write('reached')\nexcept OSError:\n    pass\n"
    )
    listener.settimeout(0.1)
    result = _evaluate(row, pristine, work, tmp_path)
    with pytest.raises(TimeoutError):
        listener.accept()  # nobody connected
    listener.close()
    assert result.reward == 1.0 and result.details["sandboxed"] is True
    assert not escaped.exists() and not Path(str(escaped) + ".net").exists()
