"""`polar launch slurm` for real, on the Slurm clusters of this machine (tests/cluster/conftest.py): a production
recipe through NeMo-RL's own ray.sub, from its checkout, unchanged, on 1 node and on 2 (each in its own namespaces).
What it reaches is read from ray.sub's own files and our rollout store: our sidecar (the rollout server and a
registered gateway on every node), the Ray head (and worker), the driver started.
The driver then stops in NeMo-RL's GRPO import (this CPU environment runs Python 3.11; NeMo-RL wants 3.13 and
GPUs): the boundary of what this machine can run. With --learn the driver is polar learn's CPU loop, which trains
the tiny model on rollouts from both nodes to the job's end."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest

from nemo_polar.cluster.slurm import ENDED, follow

from ..conftest import requires_nemo_rl
from .conftest import requires_nodes

RECIPE = "recipes/grpo-qwen3.5-4b-2n8g-megatron-polar-codex.yaml"
# `uv run X` would build NeMo-RL's GPU venv inside the checkout; this one runs X as that venv would, in the
# Python that imports NeMo-RL here.
UV = '#!/bin/sh\n[ "$1" = run ] || exit 2\nshift\n'
UV += 'PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" exec "$NEMO_RL_PYTHON" "$@"\n'


def _launch_env(tmp_path: Path, cluster) -> dict[str, str]:
    """What `source <cluster>/env.sh` sets (`polar cluster slurm up` writes it), the stand-in for `uv`, and a HOME
    with a stale Ray token (left by an earlier Ray): the launch needs nothing set by hand."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "uv").write_text(UV)
    (tmp_path / "bin" / "uv").chmod(0o755)
    (tmp_path / "home" / ".ray").mkdir(parents=True)
    (tmp_path / "home" / ".ray" / "auth_token").write_text("a-token-from-an-earlier-ray\n")
    env = os.environ | cluster.launch_env()
    return env | {
        "PATH": os.pathsep.join([str(tmp_path / "bin"), env["PATH"]]),
        "HOME": str(tmp_path / "home"),
        "PYTHONDONTWRITEBYTECODE": "1",  # nothing written into the checkout
    }


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


def _launch(cluster, nodes: int, tmp_path: Path) -> tuple[dict, Path, str, float]:
    """`polar launch slurm --nodes N --wait --json` with no slurm.* override; (job, its ray.sub log folder, its
    slurm-<id>.out, seconds from launch to the job's end), the job's own checks made."""
    run_dir, store = tmp_path / "run", tmp_path / "store"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "nemo_polar.cli", "launch", "slurm", "--nodes", str(nodes), "--recipe", RECIPE,
         "--wait", "--json", "--no-check", f"run_dir={run_dir}",
         f"topology.store_dir={store}"],
        capture_output=True, text=True, timeout=400, env=_launch_env(tmp_path, cluster),
    )  # fmt: skip
    seconds = time.monotonic() - started
    job = json.loads(done.stdout)
    assert job["job_state"] in ENDED and Path(job["slurm_out"]) == run_dir / f"slurm-{job['job_id']}.out"
    out = Path(job["slurm_out"]).read_text()
    # the cluster's default partition and GRES, with no slurm.* override
    started_line = f"ray.sub started (job={job['job_id']} nodes={nodes} partition=batch node={cluster.names[0]})"
    assert started_line in out and "--gres=gpu:8" in out, done.stderr[-2000:]
    # ray.sub's driver: NeMo-RL's entry point ran, up to its GRPO import; the job failed there, with exit 1
    driver = (Path(job["log_dir"]) / "ray-driver.log").read_text()
    assert "run_grpo_nemo_gym.py" in driver and "nemo_rl.algorithms.grpo" in driver, driver[-2000:]
    assert (job["job_state"], job["exit_code"], done.returncode) == ("FAILED", "1:0", 1)
    shim = (cluster.root / "log" / "polar_container.log").read_text()
    assert f"job={job['job_id']} step=" in shim and "image=nemo-rl:7ea279a" in shim and "name=ray-head" in shim
    assert not _processes_naming(str(store)) and not _processes_naming(str(run_dir))  # nothing left running
    return job, Path(job["log_dir"]), out, seconds


def _registered(store: Path) -> dict[str, str]:
    """The rollout store's gateway nodes: id -> the URL each registered."""
    with sqlite3.connect(store / "rollout.sqlite") as db:
        return {r[0]: json.loads(r[1])["url"] for r in db.execute("SELECT id, registration FROM nodes")}


def _driver_at(logs: Path) -> str:
    head = (logs / "ray-head.log").read_text()
    driver_at = re.search(r"\[\+(\d+)s\] head: cluster ready, launching driver", head)
    assert driver_at, head[-2000:]
    return driver_at.group(1)


@requires_nemo_rl
@requires_nodes
def test_a_production_recipe_runs_on_two_nodes_up_to_the_driver(slurm_cluster2, tmp_path):
    """Head and worker, the rollout server on the first node, a gateway on each binding port 6000 in its own
    network namespace and registering across the bridge."""
    job, logs, out, seconds = _launch(slurm_cluster2, 2, tmp_path)
    n1, n2 = slurm_cluster2.names
    ready = {p.name for p in (logs / "sandbox").glob("SANDBOX_READY_*")}
    assert ready == {f"SANDBOX_READY_{n1}", f"SANDBOX_READY_{n2}"}
    sidecars = [p.read_text() for p in (logs / "sandbox").glob("sandbox-*.log")]
    rollout = [t for t in sidecars if "polar rollout server on http://0.0.0.0:6001" in t]
    assert len(sidecars) == 2 and len(rollout) == 1 and f"polar gateway node {n1}" in rollout[0]  # first node only
    # the second node runs a gateway only (its first try to register may find the rollout server not up yet)
    assert any(f"polar gateway node {n2}" in t and "polar rollout server on" not in t for t in sidecars)
    assert _registered(tmp_path / "store") == {n1: f"http://{n1}:6000", n2: f"http://{n2}:6000"}  # n2's across
    assert (logs / "STARTED_RAY_HEAD").exists() and (logs / "ray-worker-0.log").exists()
    head = (logs / "ray-head.log").read_text()
    assert "Number of actors online: 16/16" in head + out  # the worker's 8 units joined the head's 8
    shim = (slurm_cluster2.root / "log" / "polar_container.log").read_text()
    assert f"job={job['job_id']} step=" in shim and f"host={n2}" in shim and "name=ray-worker" in shim
    print(f"driver launched {_driver_at(logs)} s into the job; launch to job end {seconds:.0f} s; {job}")


@requires_nemo_rl
@pytest.mark.skipif(
    not os.environ.get("POLAR_TEST_SLURM_1NODE"),
    reason="the 2-node launch checks all this does, on namespaced nodes; POLAR_TEST_SLURM_1NODE=1 runs it too",
)
def test_a_production_recipe_runs_on_one_node_up_to_the_driver(slurm_cluster, tmp_path):
    """The node is this machine, on its own network: the rollout server and the gateway beside the Ray head."""
    job, logs, _, seconds = _launch(slurm_cluster, 1, tmp_path)
    host = slurm_cluster.hostname
    assert (logs / "sandbox" / f"SANDBOX_READY_{host}").exists() and (logs / "STARTED_RAY_HEAD").exists()
    sidecar = (logs / "sandbox" / "sandbox-0.log").read_text()
    assert "polar rollout server on http://0.0.0.0:6001" in sidecar and f"polar gateway node {host}" in sidecar
    assert _registered(tmp_path / "store") == {host: f"http://{host}:6000"}
    print(f"driver launched {_driver_at(logs)} s into the job; launch to job end {seconds:.0f} s; {job}")


# polar learn as the job's driver, NeMo-RL's loss (found here), for a few small steps: what is tested here is the
# job (sessions on both nodes, weights reloaded under the pause of both); that the reward rises is test_learn's
PROMPTS, SAMPLES, STEPS = 4, 4, 3
LEARN = [f"steps={STEPS}", f"prompts={PROMPTS}", f"samples={SAMPLES}", "lr=6e-3", "solved_after=null"]


@requires_nemo_rl
@requires_nodes
@pytest.mark.vllm
def test_polar_learn_as_the_driver_trains_on_rollouts_from_both_nodes(slurm_cluster2, tmp_path):
    """vLLM on the first node, every session dispatched by the job's rollout server to the gateway of one node or
    the other, the weights reloaded under the rollout server's pause of both; the job ends COMPLETED."""
    run_dir, store = tmp_path / "run", tmp_path / "store"
    done = subprocess.run(
        [sys.executable, "-m", "nemo_polar.cli", "launch", "slurm", "--nodes", "2", "--learn", "--wait", "--json",
         f"run_dir={run_dir}", f"topology.store_dir={store}", *LEARN],
        capture_output=True, text=True, timeout=1200, env=_launch_env(tmp_path, slurm_cluster2),
    )  # fmt: skip
    job = json.loads(done.stdout)
    driver = (Path(job["log_dir"]) / "ray-driver.log").read_text()
    assert (job["job_state"], job["exit_code"], done.returncode) == ("COMPLETED", "0:0", 0), driver[-3000:]
    learn = job["learn"]
    # vLLM served, at every step, the weights torch trained the step before: the reloads reached it
    assert learn["steps"] == STEPS and learn["max_logprob_err"] <= 1e-4
    assert (learn["serving"], learn["loss"]) == ("vllm", "nemo_rl")
    n1, n2 = slurm_cluster2.names
    by_node = learn["sessions_by_node"]
    assert set(by_node) == {n1, n2} and min(by_node.values()) > 0, by_node
    assert sum(by_node.values()) == PROMPTS * SAMPLES * STEPS
    # every call of step k ran under policy version k, read from both nodes' record stores
    assert [h["policy_versions"] for h in learn["history"]] == [[str(k)] for k in range(learn["steps"])]
    assert _registered(store) == {n1: f"http://{n1}:6000", n2: f"http://{n2}:6000"}
    assert not _processes_naming(str(store)) and not _processes_naming(str(run_dir))  # nothing left running
    print(f"{learn['steps']} steps, reward {learn['reward_first']} -> {learn['reward_last']}, {by_node}; "
          f"polar learn {learn['seconds']} s, launch to job end {job['seconds']} s")  # fmt: skip


def _read_only(store: Path) -> closing[sqlite3.Connection]:
    """The rollout store, read-only while the job writes it."""
    return closing(sqlite3.connect(f"file:{store / 'rollout.sqlite'}?mode=ro", uri=True, timeout=30))


def _sessions(store: Path, where: str = "1") -> dict[str, tuple[str, str | None, str | None]]:
    """The rollout store's sessions (id -> state, node, result) matching `where`, read-only while the job writes;
    the store's own integrity check made first."""
    with _read_only(store) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        rows = db.execute(f"SELECT id, state, node_id, result FROM sessions WHERE {where}")  # noqa: S608 (ours)
        return {sid: (state, node, result) for sid, state, node, result in rows}


def _store_made(store: Path) -> bool:
    """Whether the rollout server has made its store: the file appears on its first connection, a moment before
    its tables do."""
    if not (store / "rollout.sqlite").exists():
        return False
    with _read_only(store) as db:
        made = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sessions'").fetchone()
    return made is not None


FINAL = "state IN ('completed', 'error', 'timeout', 'cancelled')"


def _until(what: str, ok, timeout_s: float = 600) -> None:
    started = time.monotonic()
    while not ok():
        assert time.monotonic() < started + timeout_s, f"no {what} after {timeout_s:.0f} s"
        time.sleep(1)
    print(f"{what}: {time.monotonic() - started:.0f} s")


@requires_nemo_rl
@requires_nodes
@pytest.mark.vllm
def test_a_node_lost_then_scancel_loses_no_result_trains_no_lost_session_and_leaves_no_process(
    lossy_cluster, tmp_path
):
    """A --learn job on two nodes. The second node dies while the first step's sessions run on it (its pid 1
    killed: slurmd, its steps and their sandboxes with it): the rollout server ends its started sessions masked
    (never a reward of 0) and dispatches the unstarted ones again, and the job goes on: the next step runs on the
    first node alone. Then `scancel`: the job ends CANCELLED, nothing of it runs on any node, and every result
    the rollout store held is still there, unchanged, in stores that check out."""
    run_dir, store = tmp_path / "run", tmp_path / "store"
    env = _launch_env(tmp_path, lossy_cluster)
    done = subprocess.run(
        [sys.executable, "-m", "nemo_polar.cli", "launch", "slurm", "--nodes", "2", "--learn", "--json",
         f"run_dir={run_dir}", f"topology.store_dir={store}", "steps=50",
         f"prompts={PROMPTS}", f"samples={SAMPLES}"],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    job_id = json.loads(done.stdout)["job_id"]
    n1, n2 = lossy_cluster.names
    running_on_n2 = f"node_id = '{n2}' AND state = 'running'"
    _until(
        "session running on the second node",
        lambda: _store_made(store) and _sessions(store, running_on_n2),
    )
    live = _sessions(store, f"node_id = '{n2}' AND NOT {FINAL}")
    lossy_cluster.lose(n2)
    before = _sessions(store, FINAL)
    lost = ",".join(repr(sid) for sid in live if sid not in before)  # live on the second node when it died
    # the job goes on: the next step's sessions run, on the first node only
    _until("session of the next step done", lambda: _sessions(store, f"task_id LIKE 'step001-%' AND {FINAL}"))
    assert {node for _, node, _ in _sessions(store, "task_id LIKE 'step001-%'").values()} <= {n1, None}
    # each one ended masked (nothing to train on, never a reward of 0) or ran again on the first node
    ended = _sessions(store, f"id IN ({lost})")
    for sid, (state, node, result) in ended.items():
        r = json.loads(result)
        assert (state == "completed" and node == n1) or (state == "error" and r["masked"] and r["error"]), (sid, r)
    assert "error" in {state for state, _, _ in ended.values()}  # the running ones were lost, not run twice
    assert _processes_naming(str(store)) and _processes_naming(str(run_dir))  # what must be gone is there now
    subprocess.run(["scancel", job_id], env=env, check=True)
    # what an operator does for a dead machine, else the job stays COMPLETING until SlurmdTimeout (300 s) says it
    lossy_cluster.client("scontrol", "update", f"nodename={n2}", "state=down", "reason=lost")
    assert follow(job_id, poll_s=1, say=print).state == "CANCELLED"
    after = _sessions(store, FINAL)
    assert {sid: after.get(sid) for sid in before} == before and len(after) < PROMPTS * SAMPLES * 50
    for records in (store / "nodes").glob("*/records.sqlite"):  # each node's record store checks out too
        with closing(sqlite3.connect(f"file:{records}?mode=ro", uri=True)) as db:
            assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    gone = lambda: not _processes_naming(str(store)) and not _processes_naming(str(run_dir))  # noqa: E731
    _until("end of the job's processes", gone, 60)  # Slurm kills the steps' cgroups a moment after the state
