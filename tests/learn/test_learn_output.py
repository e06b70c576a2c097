"""`polar learn` as a log holds it: run as `make run` runs it, its output a pipe, not a terminal. Each step is a
line with the bar's figures, and the summary counts what our own loss trained on (it once said 0 for a run that
trained on every session)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.vllm


def test_a_short_run_without_a_terminal_writes_its_steps_and_counts_what_it_trained(tmp_path):
    overrides = [f"run_dir={tmp_path}", "steps=2", "prompts=2", "samples=2", "update=polar", "solved_after=null"]
    done = subprocess.run(
        [sys.executable, "-m", "nemo_polar.cli", "learn", "--json", *overrides],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    lines = done.stderr.splitlines()
    assert "starting vLLM (about a minute on CPU)" in lines
    steps = [line for line in lines if re.match(r"step \d/2", line)]
    assert steps[0] == "step 0/2  00:00:00", lines
    for n, line in enumerate(steps[1:], 1):
        assert re.fullmatch(
            rf"step {n}/2  reward [0-9.]+  logprob err [0-9.e+-]+  trained tokens [1-9]\d*  [0-9.]+ s  \d\d:\d\d:\d\d",
            line,
        ), line
    summary = json.loads(done.stdout)
    assert (summary["steps"], summary["loss"]) == (2, "polar")
    # the one-call agent: one chain per session, 2 x 2 sessions a step, every sampled token trained
    assert summary["chains_built"] == summary["chains_trained"] == 2 * 2 * 2, summary
    assert summary["trained_tokens"] == summary["sampled_tokens"] > 0, summary
