"""`polar bench grading` on a repository of 10,000 commits built here: the cut copy carries nothing past the
task's commit, the uncut one does, and both arms of the evaluation pay the reference fix. Figures are checked
for consistency with each other, never against targets or timings."""

from __future__ import annotations

import json
import subprocess
import sys

from nemo_polar.bench.grading import run


def test_the_cut_on_ten_thousand_commits_and_both_evaluation_arms():
    result = run(commits=10_000, repeats=1, tasks=1)
    sizes = [h["commits"] for h in result["history"]]
    assert sizes == [2_500, 5_000, 10_000]
    for h in result["history"]:
        assert h["commits_kept"] == int(h["commits"] * 0.8)  # the past is kept, to the task's commit
        assert h["future_before"] and h["future_after"] == []  # the plain copy leaks, the cut one does not
        assert h["before_s"] > 0 and h["cut_s"] > 0 and h["in_place_s"] > 0
    evaluation = result["evaluation"]
    assert evaluation["rewards"] == {"defended": [1.0], "baseline": [1.0]}  # no false zero from the defences
    assert evaluation["seconds"]["defended"]["evaluate"] > 0 and evaluation["runs_per_arm"] == 1
    print(json.dumps(result, indent=2))


def test_the_command_prints_it_and_says_when_the_cut_failed_to_hold():
    done = subprocess.run(
        [sys.executable, "-m", "nemo_polar.cli", "bench", "grading", "--commits", "200", "--repeats", "1",
         "--tasks", "1", "--json"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert [h["commits"] for h in result["history"]] == [50, 100, 200]
