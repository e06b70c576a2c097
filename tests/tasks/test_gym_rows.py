"""`polar data swe`: SWE-bench (test ids as JSON strings) and SWE-Gym (lists) rows, from JSONL or parquet as
users download them, become the Gym rows a recipe names; our agent turns each into a task on its image."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nemo_polar.env import gym as polar_gym

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "swe" / "rows.jsonl"
RECIPE_DEFAULTS = {  # the polar_agent section of recipes/grpo_qwen3.5_4b_polar_swe.yaml
    "harness": {"name": "codex", "max_steps": 100},
    "runtime": {"kind": "apptainer", "image": None, "cpus": 2, "memory": "8g", "network": "proxy"},
    "evaluator": {"kind": "swebench", "config": {"mode": "auto", "timeout_s": 1800}},
}


def _convert(source: Path, out: Path, *extra: str) -> list[dict]:
    done = subprocess.run(
        [sys.executable, "-m", "nemo_polar.cli", "data", "swe", str(source), "--out", str(out), *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rows"] == 2
    return [json.loads(line) for line in out.read_text().splitlines()]


@pytest.fixture(params=["jsonl", "parquet"])
def source(request, tmp_path) -> Path:
    if request.param == "jsonl":
        return FIXTURE
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "rows.parquet"
    rows = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    pq.write_table(
        pa.Table.from_pylist([{k: json.dumps(v) if isinstance(v, list) else v for k, v in r.items()} for r in rows]),
        path,
    )
    return path


def test_rows_become_gym_rows_on_their_instance_images(source, tmp_path):
    bench, gym = _convert(source, tmp_path / "train.jsonl")
    assert bench["agent_ref"] == {"type": "responses_api_agents", "name": "polar_agent"}
    assert bench["responses_create_params"]["input"][0]["content"].startswith("Modeling's `separability_matrix`")
    # SWE-bench's own image naming (dunders become _1776_), pulled by apptainer from docker
    assert bench["polar"]["runtime"]["image"] == "docker://swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest"
    assert gym["polar"]["task_id"] == "getmoto__moto-5752" and gym["repo"] == "getmoto/moto"
    for row in (bench, gym):  # the agent turns each into a task: the row's image, its tests for the evaluator
        task = polar_gym.task_from_row(row, RECIPE_DEFAULTS)
        assert task.runtime.kind == "apptainer" and task.runtime.image == row["polar"]["runtime"]["image"]
        # the agent works where the image keeps the repository, with the image's Python, from base_commit
        assert task.runtime.options["workdir"] == "/testbed" and task.runtime.repo is None
        assert task.runtime.env["PATH"].startswith("/opt/miniconda3/envs/testbed/bin:")
        assert [s.command for s in task.runtime.prepare] == [f"git reset -q --hard {row['base_commit']}"]
        assert (task.runtime.cpus, task.runtime.memory) == (2, "8g")  # the recipe's limits stay
        assert task.instruction == row["problem_statement"] and task.fields["FAIL_TO_PASS"]
        assert task.evaluator.kind == "swebench"


def test_docker_hosts_get_plain_image_names(tmp_path):
    bench, _ = _convert(FIXTURE, tmp_path / "train.jsonl", "--engine", "docker")
    assert bench["polar"]["runtime"]["image"] == "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest"


def test_rows_become_image_tasks_directly(tmp_path):
    from nemo_polar.tasks.dataset import load_jsonl

    bench, gym = load_jsonl(FIXTURE)
    spec = bench.task_spec({"name": "codex"}, "swebench", runtime={"kind": "docker", "cpus": 2})
    assert spec.runtime.options["image"] == "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest"
    assert (spec.runtime.options["workdir"], spec.runtime.options["cpus"], spec.evaluator.kind) == (
        "/testbed",
        2,
        "swebench",
    )
    assert spec.runtime.prepare[0].command == f"git reset -q --hard {bench.base_commit}"
    local = gym.task_spec({"name": "codex"})  # no runtime: this machine, the row's repo_path (none here)
    assert local.runtime.kind == "local" and "workdir" not in local.runtime.options and not local.runtime.prepare
    folder = gym.task_spec({"name": "codex"}, runtime={"kind": "image", "image": "/rootfs/swe"})
    assert folder.runtime.options["image"] == "/rootfs/swe" and folder.runtime.options["workdir"] == "/testbed"


def test_a_bad_row_is_named(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps({"instance_id": "x", "repo": "a/b", "base_commit": "c", "problem_statement": "p"}) + "\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "nemo_polar.cli", "data", "swe", str(bad), "--out", str(tmp_path / "o.jsonl")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "bad.jsonl:1" in done.stderr and "FAIL_TO_PASS" in done.stderr
