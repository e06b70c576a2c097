"""examples/own_tasks, walked as its README walks it: the rows its script writes are graded by `polar tasks check`
(SWE and Gym rows), run by `polar up` (the Gym rows, the shell harness playing the agent), and read by our Gym agent
under the recipe's defaults as in training."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from nemo_polar.env import gym as polar_gym
from nemo_polar.recipes.check import POLAR_AGENT_PATH, RECIPES_DIR

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "own_tasks"
POLAR = Path(sys.executable).with_name("polar")
NO_CHANGE = "leave it: "  # a row whose instruction starts so gets no change from the agent below


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("own_tasks")
    done = subprocess.run([sys.executable, str(EXAMPLE / "make_rows.py"), str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    made = json.loads(done.stdout)
    swe, gym = ([json.loads(line) for line in Path(p).read_text().splitlines()] for p in made["rows"])
    return made | {"out": out, "swe": swe, "gym": gym}


def test_polar_tasks_check_grades_both_row_kinds(made):
    """The fix 1, no change 0, the wrong fix 0: on the SWE row and on the Gym row, each on its own copy."""
    argv = [str(POLAR), "tasks", "check", "--swe", made["rows"][0], "--gym", made["rows"][1], "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    report = json.loads(done.stdout)
    assert done.returncode == 0 and report["failures"] == [], report
    assert (report["tasks"], report["checks"], report["correct"]) == (2, 6, 6)
    assert report["warnings"] == []  # the repository holds nothing past its base commit


def test_polar_up_runs_the_gym_rows_fix_paid_no_change_not(made, fake_upstream):
    """One `polar up` over Gym rows: the shell harness applies the known fix (1.0) or changes nothing (0.0)."""
    fixed = made["gym"][0]
    untouched = json.loads(json.dumps(fixed))
    untouched["polar"] |= {
        "task_id": "textstats-untouched",
        "instruction": NO_CHANGE + fixed["polar"]["fields"]["repo"],
    }
    rows = made["out"] / "up.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in (fixed, untouched)))
    agent = f'case "$POLAR_TASK" in "{NO_CHANGE}"*) ;; *) git apply {EXAMPLE}/fix.diff ;; esac'
    argv = [str(POLAR), "up", f"dataset={rows}", "harness=shell", f"harness.command={json.dumps(agent)}"]
    argv += [f"runtime.volumes=[{EXAMPLE}:{EXAMPLE}:ro]", "num_samples=1", f"run_dir={made['out'] / 'runs'}"]
    argv += ["vllm.start=false", f"proxy.upstream.url={fake_upstream.url}"]  # the agent makes no model call
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (run,) = (made["out"] / "runs").iterdir()
    results = {s["task_id"]: s["result"] for s in map(json.loads, (run / "results.jsonl").read_text().splitlines())}
    assert {t: (r["reward"], r["masked"]) for t, r in results.items()} == {
        "textstats-1-shell": (1.0, False),
        "textstats-untouched-shell": (0.0, False),
    }, results
    assert results["textstats-untouched-shell"]["stats"]["evaluation"]["details"]["test_files"] == [
        "tests/test_hidden.py"
    ]


def test_the_gym_row_becomes_the_task_a_recipe_runs(made):
    """Our Gym agent's reading of the row under the base recipe's agent section (its harness, its runtime kind and
    limits), the row naming its image as the README says for a cluster."""
    recipe = yaml.safe_load((RECIPES_DIR / "grpo_qwen3.5_4b_polar_swe.yaml").read_text())
    section = recipe
    for key in POLAR_AGENT_PATH.split("."):
        section = section[key]
    defaults = {k: section[k] for k in ("harness", "runtime", "evaluator")}
    row = json.loads(json.dumps(made["gym"][0]))
    row["polar"]["runtime"]["image"] = "registry.example/textstats:1"
    task = polar_gym.task_from_row(row, defaults)
    assert task.runtime.kind == defaults["runtime"]["kind"] and task.runtime.image == "registry.example/textstats:1"
    assert (task.runtime.repo, task.runtime.commit) == (made["repo"], made["base_commit"])
    assert task.evaluator.kind == "tests" and task.harness.name == defaults["harness"]["name"]
    assert task.instruction == made["swe"][0]["problem_statement"]
    assert task.fields["FAIL_TO_PASS"] == made["swe"][0]["FAIL_TO_PASS"] and task.fields["test_patch"]
