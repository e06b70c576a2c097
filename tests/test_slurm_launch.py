"""`polar launch slurm --dry-run`: the rollout server on node 0, a gateway per node, ray.sub with the recipe."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from nemo_polar.cluster.topology import LaunchConfig, plan, split_overrides
from nemo_polar.config import load
from nemo_polar.server.gateway.node import GatewayConfig
from nemo_polar.server.rollout import RolloutConfig

RECIPE = "recipes/grpo-qwen3.5-4b-2n8g-megatron-polar-codex.yaml"


def _dry_run(nodes: int, *extra: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "nemo_polar.cli", "launch", "slurm", "--nodes", str(nodes), "--recipe", RECIPE]
        + ["--dry-run", "--json", *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("nodes", [2, 4])
def test_dry_run_renders_every_node(nodes):
    p = _dry_run(nodes, "grpo.max_num_steps=10", "topology.gateway_port=9800")
    hosts = [f"node-{i}" for i in range(nodes)]
    assert p["hosts"] == hosts and p["urls"]["rollout"] == "http://node-0:8900"
    by_node = {n["host"]: {c["name"]: c for c in n["commands"]} for n in p["per_node"]}
    assert list(by_node["node-0"]) == ["rollout", "gateway"]  # the rollout server first, on the first node
    assert all(list(by_node[h]) == ["gateway"] for h in hosts[1:])
    assert by_node["node-0"]["rollout"]["argv"][:2] == ["polar", "serve-rollout"]
    for host in hosts:
        gw = by_node[host]["gateway"]
        assert gw["argv"][:2] == ["polar", "serve-gateway"]
        assert f"node.node_id={host}" in gw["argv"] and "node.rollout_url=http://node-0:8900" in gw["argv"]
        assert f"node.public_url=http://{host}:9800" in gw["argv"] and "backend=nemo_rl" in gw["argv"]
        assert gw["srun"][:2] == ["srun", "--overlap"] and f"--nodelist={host}" in gw["srun"]
    assert p["readiness"][0]["url"] == "http://node-0:8900/health"
    assert p["readiness"][1]["expect"] == hosts
    env = p["training"]["env"]
    assert p["training"]["argv"][0] == "bash" and p["training"]["argv"][1].endswith("/ray.sub")
    assert "run_grpo_nemo_gym.py --config" in env["COMMAND"] and env["COMMAND"].count(RECIPE) == 1
    assert f"cluster.num_nodes={nodes}" in env["COMMAND"] and "grpo.max_num_steps=10" in env["COMMAND"]
    assert "rollout_url=http://node-0:8900" in env["COMMAND"] and "NEMO_GYM_EXTRA_ROOTS=" in env["COMMAND"]
    assert "topology" not in env["COMMAND"]  # launch overrides stay ours
    assert {"CONTAINER", "MOUNTS", "GPUS_PER_NODE"} <= set(env) and env["GPUS_PER_NODE"] == "8"
    assert p["sbatch"][:2] == ["sbatch", f"--nodes={nodes}"] and p["sbatch"][-1].endswith("slurm/polar_grpo.sbatch")


def test_the_rendered_commands_load_as_our_configs():
    cfg = load(LaunchConfig, "launch", [])
    p = plan(cfg, 2, RECIPE, [], ["gpu-a", "gpu-b"])
    rollout, gateway = p["per_node"][0]["commands"]
    assert load(RolloutConfig, "rollout", rollout["argv"][2:]).public_url == "http://gpu-a:8900"
    g = load(GatewayConfig, "gateway", gateway["argv"][2:])
    assert g.node.node_id == "gpu-a" and g.proxy.upstream.engine == "nemo_rl" and g.proxy.host == "0.0.0.0"
    assert g.proxy.upstream.sampling == {"temperature": 1.0, "top_p": 1.0} and g.node.capacity.run == 32


def test_text_dry_run_and_bad_recipe_override():
    proc = subprocess.run(
        [sys.executable, "-m", "nemo_polar.cli", "launch", "slurm", "--nodes", "2", "--recipe", RECIPE, "--dry-run"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and "## node 1 (node-1)" in proc.stdout and "ray.sub" in proc.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "nemo_polar.cli", "launch", "slurm", "--nodes", "2", "--recipe", RECIPE, "--dry-run"]
        + ["grpo.num_prompts_per_stpe=4"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "grpo.num_prompts_per_stpe" in bad.stderr


def test_overrides_are_split_by_section():
    recipe, launch = split_overrides(
        ["grpo.seed=1", "++logger.wandb.name=x", "topology.rollout_port=1", "slurm.time=1"]
    )
    assert recipe == ["grpo.seed=1", "++logger.wandb.name=x"] and launch == ["topology.rollout_port=1", "slurm.time=1"]


def test_single_topology_runs_one_gateway():
    p = plan(load(LaunchConfig, "launch", ["topology=single"]), 2, RECIPE, [])
    assert [c["name"] for c in p["per_node"][0]["commands"]] == ["rollout", "gateway"] and p["per_node"][1][
        "commands"
    ] == []
