"""The red-team suite against the graders as they are: per runtime, one `polar up` per kind of task (swe, history,
harbor) whose rows are every (task x attack) pair and the tasks' legitimate fixes (suite.py). Every attack row must
score 0 or be masked; every legit row must score 1.0, unmasked (no false zeros). The table of what was paid is
printed (pytest -s shows it) and kept under the suite's folder (`suite.default_base()`)."""

from __future__ import annotations

import shutil

import pytest

from nemo_polar.tasks.check import ROOTFS_PYTHON

from ..conftest import requires_docker
from . import suite

pytestmark = pytest.mark.timeout(3600)


def run_kinds(runtime: str, upstream_url: str) -> None:
    results, failures = [], []
    for kind in suite.KINDS:
        result = suite.run(runtime, kind, upstream_url)
        results.append(result)
        failures += result.failures()
        print(f"polar up {kind} {runtime}: {len(result.outcomes)} sessions in {result.wall_s} s")
    print(f"\nred team, runtime {runtime}:\n" + suite.render(results))
    assert not failures, "\n".join(failures)


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="the local runtime's sandbox needs bubblewrap")
def test_no_attack_is_paid_local(fake_upstream):
    run_kinds("local", fake_upstream.url)


def test_no_attack_is_paid_image(fake_upstream):
    if not (ROOTFS_PYTHON / "bin" / "sh").exists():
        pytest.fail(f"no root filesystem at {ROOTFS_PYTHON}: run scripts/setup.sh rootfs")
    run_kinds("image", fake_upstream.url)


@requires_docker
def test_no_attack_is_paid_docker(docker, fake_upstream):
    run_kinds("docker", fake_upstream.url)
