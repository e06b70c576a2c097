"""`polar launch slurm` for real, on the Slurm cluster of this machine (tests/cluster/conftest.py): a production
recipe through NeMo-RL's own ray.sub, from its checkout, unchanged. What it reaches is read from ray.sub's own files
and our rollout store: our sidecar (rollout server and a registered gateway), the Ray head, the driver started.
The driver then stops in NeMo-RL's GRPO import (this CPU environment runs Python 3.11; NeMo-RL wants 3.13 and
GPUs): the boundary of what this machine can run."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from nemo_polar.cluster.slurm import ENDED

from ..conftest import NEMO_RL, requires_nemo_rl

RECIPE = "recipes/grpo-qwen3.5-4b-2n8g-megatron-polar-codex.yaml"
# `uv run X` would build NeMo-RL's GPU venv inside the checkout; this one runs X as that venv would, in the
# Python that imports NeMo-RL here.
UV = '#!/bin/sh\n[ "$1" = run ] || exit 2\nshift\n'
UV += 'PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" exec "$NEMO_RL_PYTHON" "$@"\n'


def _launch_env(tmp_path: Path, cluster) -> dict[str, str]:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "uv").write_text(UV)
    (tmp_path / "bin" / "uv").chmod(0o755)
    (tmp_path / "home").mkdir()  # no ~/.ray/auth_token from earlier Ray runs: ray status would lack the token
    path = [str(tmp_path / "bin"), str(Path(sys.executable).parent), str(NEMO_RL.python.parent)]  # polar, ray
    return (
        os.environ
        | cluster.env
        | {
            "PATH": os.pathsep.join(path + [os.environ["PATH"]]),
            "HOME": str(tmp_path / "home"),
            "NEMO_RL_DIR": str(NEMO_RL.dir),
            "NEMO_RL_PYTHON": str(NEMO_RL.python),
            "PYTHONDONTWRITEBYTECODE": "1",  # nothing written into the checkout
        }
    )


def _processes_naming(text: str) -> list[str]:
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmd and str(os.getpid()) != proc.name:
            found.append(f"{proc.name}: {cmd[:200]}")
    return found


@requires_nemo_rl
def test_a_production_recipe_runs_through_ray_sub_up_to_the_driver(slurm_cluster, tmp_path):
    run_dir, store = tmp_path / "run", tmp_path / "store"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "nemo_polar.cli", "launch", "slurm", "--nodes", "1", "--recipe", RECIPE,
         "--wait", "--json", "--no-check", "polar.container=nemo-polar:test", f"run_dir={run_dir}",
         f"topology.store_dir={store}"],
        capture_output=True, text=True, timeout=400, env=_launch_env(tmp_path, slurm_cluster),
    )  # fmt: skip
    seconds = time.monotonic() - started
    job = json.loads(done.stdout)
    logs = Path(job["log_dir"])
    assert job["job_state"] in ENDED and Path(job["slurm_out"]) == run_dir / f"slurm-{job['job_id']}.out"
    out = Path(job["slurm_out"]).read_text()
    # the cluster's default partition and GRES, with no slurm.* override
    assert f"ray.sub started (job={job['job_id']} nodes=1 partition=batch" in out, done.stderr[-2000:]
    assert "--gres=gpu:8" in out
    host = slurm_cluster.hostname
    assert (logs / "sandbox" / f"SANDBOX_READY_{host}").exists() and (logs / "STARTED_RAY_HEAD").exists()
    sidecar = (logs / "sandbox" / "sandbox-0.log").read_text()
    assert "polar rollout server on http://0.0.0.0:6001" in sidecar and f"polar gateway node {host}" in sidecar
    with sqlite3.connect(store / "rollout.sqlite") as db:  # the gateway registered with the rollout server
        assert [r[0] for r in db.execute("SELECT id FROM nodes")] == [host]
    head = (logs / "ray-head.log").read_text()
    driver_at = re.search(r"\[\+(\d+)s\] head: cluster ready, launching driver", head)
    assert driver_at, head[-2000:]
    driver = (logs / "ray-driver.log").read_text()  # NeMo-RL's entry point ran, up to its GRPO import
    assert "run_grpo_nemo_gym.py" in driver and "nemo_rl.algorithms.grpo" in driver, driver[-2000:]
    assert (job["job_state"], job["exit_code"], done.returncode) == ("FAILED", "1:0", 1)
    shim = (slurm_cluster.root / "log" / "polar_container.log").read_text()
    assert f"job={job['job_id']} step=" in shim and "image=nemo-rl:7ea279a" in shim and "name=ray-head" in shim
    assert not _processes_naming(str(store)) and not _processes_naming(str(run_dir))  # nothing left running
    print(f"driver launched {driver_at.group(1)} s into the job; launch to job end {seconds:.0f} s; {job}")
