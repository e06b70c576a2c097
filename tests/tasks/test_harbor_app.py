"""Harbor tasks as most are written: their solutions and tests use the task's workdir (/app) by absolute path.
Five such tasks (tests/fixtures/harbor_app/: a file written by path, a file edited in place, a partial score in
reward.json, a verifier that crashes, a path relative to the workdir) give the same rewards in every runtime:
`local` binds the working copy at /app (bubblewrap), `image` and `docker` run it there (docker: each task's own
Dockerfile built). A partial score and a masked verifier are checked as expected, not as 1 / 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nemo_polar.env.gym import verifier_metrics
from nemo_polar.tasks.check import check_tasks
from nemo_polar.tasks.harbor import load_dataset

from ..conftest import requires_docker

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "harbor_app"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())
ROOTFS = Path(__file__).resolve().parents[2] / ".deps" / "rootfs" / "bookworm"  # minbase: coreutils, sed, awk


@requires_docker
@pytest.mark.skipif(not os.path.exists("/usr/bin/bwrap"), reason="needs bubblewrap: local binds /app with it")
def test_tasks_that_write_to_their_workdir_score_alike_in_local_image_and_docker(docker):
    runtimes = [{"kind": "local"}, {"kind": "image", "image": str(ROOTFS)}, {"kind": "docker"}]
    tasks = load_dataset(FIXTURES)
    report = check_tasks((), harbor=tasks, runtimes=runtimes, expected=EXPECTED)
    assert report["failures"] == [] and report["checks"] == report["correct"] == 2 * len(tasks) * len(runtimes)
    # the user's command: the same folder and expectations, in every runtime this machine has
    done = subprocess.run(
        [sys.executable, "-m", "nemo_polar.cli", "tasks", "check", "--harbor", str(FIXTURES), "--expect",
         str(FIXTURES / "expected.json"), "--json"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    cli = json.loads(done.stdout)
    assert done.returncode == 0 and cli["failures"] == [] and "docker" in cli["runtimes"], cli


def test_without_its_expectations_a_partial_score_and_a_broken_verifier_are_failures():
    report = check_tasks((), harbor=load_dataset(FIXTURES), runtimes=[{"kind": "local"}])
    failed = {(f["task"], f["check"]) for f in report["failures"]}
    assert failed == {("half-right", "reference"), ("broken-verifier", "reference"), ("broken-verifier", "no_change")}


def test_a_verifiers_other_numbers_are_metrics_not_reward_components():
    result = {"stats": {"evaluation": {"details": {"rewards": {"reward": 0.5, "lines_ok": 1, "lines_total": 2},
                                                   "reward_key": "reward"}}}}  # fmt: skip
    none = {
        "polar_grader_test_surface": 0.0,
        "polar_grader_runner_tampered": 0.0,
        "polar_grader_verifier_planted": 0.0,
        "polar_grader_environment_paid": 0.0,
    }
    assert verifier_metrics(result) == {"verifier_lines_ok": 1.0, "verifier_lines_total": 2.0} | none
    assert verifier_metrics({"stats": {}}) == none
    touched = {"stats": {"evaluation": {"details": {"left_out": {"conftest.py": "..."}, "tampered": []}}}}
    assert verifier_metrics(touched) == none | {"polar_grader_test_surface": 1.0}
