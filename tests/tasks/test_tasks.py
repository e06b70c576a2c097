"""The bundled task set: deterministic repos, SWE-bench rows, and `polar tasks check` end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nemo_polar.errors import ConfigError
from nemo_polar.tasks.bundled import TASKS
from nemo_polar.tasks.dataset import load_jsonl, parse_row
from nemo_polar.tasks.harbor import bundled
from nemo_polar.tasks.materialize import build, materialize

POLAR = Path(sys.executable).with_name("polar")


def test_materialize_is_deterministic(tmp_path):
    first, second = materialize(tmp_path / "a"), materialize(tmp_path / "b")
    assert first == second and len(first) == len(TASKS) >= 10
    log = subprocess.run(["git", "log", "--format=%an <%ae> %ad"], cwd=tmp_path / "a" / TASKS[0].instance_id,
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert log.strip() == "polar <polar@localhost> Thu Jan 1 00:00:00 2026 +0000"


def test_tasks_are_distinct_and_complete():
    assert len({t.instance_id for t in TASKS}) == len(TASKS)
    for t in TASKS:
        assert t.fail_to_pass and t.pass_to_pass and t.problem_statement
        assert t.patch != t.wrong_patch and t.test_patch.startswith("diff --git")


def test_build_writes_rows_the_loader_reads(tmp_path):
    path = build(tmp_path / "out")
    rows = load_jsonl(path)
    assert [r.instance_id for r in rows] == [t.instance_id for t in TASKS]
    assert all(Path(r.repo_path, ".git").is_dir() for r in rows)
    spec = rows[0].task_spec({"name": "shell", "command": "true"})
    assert spec.runtime.repo == rows[0].repo_path and spec.fields["FAIL_TO_PASS"] == rows[0].FAIL_TO_PASS


GOOD = {
    "instance_id": "o__r-1",
    "repo": "o/r",
    "base_commit": "abc",
    "problem_statement": "fix it",
    "patch": "",
    "test_patch": "",
    "FAIL_TO_PASS": '["t.py::a"]',  # SWE-bench ships JSON strings
    "PASS_TO_PASS": ["t.py::b"],  # SWE-Gym and local files: lists
    "hints_text": "kept",
}


def test_good_rows_in_both_list_forms():
    row = parse_row(GOOD)
    assert row.FAIL_TO_PASS == ["t.py::a"] and row.PASS_TO_PASS == ["t.py::b"]
    assert row.model_dump()["hints_text"] == "kept"


@pytest.mark.parametrize(
    "change, key",
    [
        ({"FAIL_TO_PASS": None}, "FAIL_TO_PASS"),
        ({"FAIL_TO_PASS": "[]"}, "FAIL_TO_PASS"),
        ({"PASS_TO_PASS": "{oops"}, "PASS_TO_PASS"),
        ({"PASS_TO_PASS": [1]}, "PASS_TO_PASS"),
        ({"instance_id": ""}, "instance_id"),
        ({"base_commit": None}, "base_commit"),
    ],
)
def test_bad_rows_name_the_key(change, key):
    fields = {k: v for k, v in (GOOD | change).items() if v is not None}
    with pytest.raises(ConfigError, match=key):
        parse_row(fields)


def test_jsonl_errors_name_the_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(GOOD) + "\n\n" + json.dumps(GOOD | {"problem_statement": ""}) + "\n")
    with pytest.raises(ConfigError, match=r"t.jsonl:3: problem_statement"):
        load_jsonl(path)
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps(GOOD) + "\n")
    with pytest.raises(ConfigError, match="appears twice"):
        load_jsonl(path)


def test_polar_tasks_check_json(docker):
    """On the tests' Docker engine (DOCKER_HOST points at it), with the tasks' FROM images mapped to local ones."""
    done = subprocess.run([str(POLAR), "tasks", "check", "--json"], capture_output=True, text=True, timeout=600)
    report = json.loads(done.stdout)
    assert done.returncode == 0, report
    # the Harbor-format tasks are checked in local, image (scripts/setup.sh rootfs) and docker (each task's own
    # Dockerfile built on the engine), three ways each
    assert report["runtimes"] == ["local", "image", "docker"], "no Debian root filesystem: run scripts/setup.sh rootfs"
    assert report["tasks"] == len(TASKS) + len(bundled()) and report["failures"] == []
    runtimes = len(report["runtimes"])
    assert report["checks"] == report["correct"] == 3 * len(TASKS) + 3 * runtimes * len(bundled())
    assert report["elapsed_s"] > 0


def test_polar_tasks_check_warns_about_rows_whose_repositories_carry_their_future(tmp_path):
    from tests.redteam.history_repo import build as leaky

    roman, paginate = (next(t for t in TASKS if t.name == name) for name in ("roman", "paginate"))
    rows = [leaky(roman, tmp_path / "leaky"), json.loads(build(tmp_path / "clean", (paginate,)).read_text())]
    dataset = tmp_path / "rows.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows))
    done = subprocess.run([str(POLAR), "tasks", "check", "--swe", str(dataset), "--json"], capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    report = json.loads(done.stdout)
    assert done.returncode == 0 and report["failures"] == [], done.stderr
    warned = {w["task"] for w in report["warnings"]}
    assert warned == {roman.instance_id}  # the bundled repository holds nothing past its commit
    assert any("refs beyond" in w["warning"] for w in report["warnings"])
