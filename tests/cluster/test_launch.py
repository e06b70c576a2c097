"""`polar launch slurm`: NeMo-RL's ray.sub runs training, our rollout server and gateways run as its
per-node sidecar; a NeMo-RL release that ignores mask_sample is refused; ports stay in the sidecar's band."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest

from nemo_polar.cluster.topology import LaunchConfig, TopologyConfig, plan, sidecar_commands, split_overrides
from nemo_polar.config import load
from nemo_polar.errors import ConfigError
from nemo_polar.learn.config import FIRST_VERSION, SAMPLING, LearnConfig
from nemo_polar.server.gateway.node import GatewayConfig
from nemo_polar.server.rollout import RolloutConfig

from ..conftest import requires_nemo_rl

RECIPE = "recipes/grpo-qwen3.5-4b-2n8g-megatron-polar-codex.yaml"
IMAGE = "polar.container=registry.example/nemo-polar:1"


def _launch(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nemo_polar.cli", "launch", "slurm", "--recipe", RECIPE, *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )


@pytest.mark.parametrize("nodes", [2, 4])
def test_dry_run_hands_ray_sub_the_training_and_our_sidecar(nodes):
    done = _launch("--nodes", str(nodes), "--dry-run", "--json", "--no-check", IMAGE, "grpo.max_num_steps=10")
    assert done.returncode == 0, done.stderr
    p = json.loads(done.stdout)
    env = p["ray_sub"]["env"]
    assert p["sbatch"][:2] == ["sbatch", f"--nodes={nodes}"] and p["sbatch"][-1].endswith("/ray.sub")
    assert "run_grpo_nemo_gym.py --config" in env["COMMAND"] and env["COMMAND"].count(RECIPE) == 1
    assert f"cluster.num_nodes={nodes}" in env["COMMAND"] and "grpo.max_num_steps=10" in env["COMMAND"]
    assert "NEMO_GYM_EXTRA_ROOTS=" in env["COMMAND"] and "NEMO_RL_DIR=" in env["COMMAND"]
    assert "POLAR_ROLLOUT_URL=http://$(hostname):6001" in env["COMMAND"]  # the driver runs on the first node
    assert "topology" not in env["COMMAND"] and "polar.container" not in env["COMMAND"]  # launch overrides stay ours
    assert env["CONTAINER"] == "nemo-rl:7ea279a" and env["SANDBOX_CONTAINER"] == "registry.example/nemo-polar:1"
    assert env["SANDBOX_COMMAND"].startswith("polar launch sidecar") and env["NEMO_SKILLS_SANDBOX_PORT"] == "6000"
    assert env["GPUS_PER_NODE"] == "8" and "POLAR_CONTROL_TOKEN" not in env  # minted at submit only
    by_node = {n["host"]: [c["name"] for c in n["commands"]] for n in p["per_node"]}
    assert by_node == {"node-0": ["rollout", "gateway"]} | {f"node-{i}": ["gateway"] for i in range(1, nodes)}


def test_the_sbatch_line_leaves_partition_account_and_gres_to_the_cluster_unless_set(tmp_path):
    """Unset, they are asked of the cluster at submit (ray.sub's header placeholders must never apply);
    the job's own log goes to run_dir, beside ray.sub's <jobid>-logs/."""
    done = _launch("--nodes", "2", "--dry-run", "--json", "--no-check", IMAGE, f"run_dir={tmp_path}")
    sbatch = json.loads(done.stdout)["sbatch"]
    assert f"--output={tmp_path}/slurm-%j.out" in sbatch
    assert not [a for a in sbatch if a.startswith(("--gres", "--partition", "--account"))]
    done = _launch(
        "--nodes", "2", "--dry-run", "--json", "--no-check", IMAGE,
        "slurm.gres=true", "slurm.gpus_per_node=4", "slurm.partition=gpu", "slurm.account=acct",
    )  # fmt: skip
    sbatch = json.loads(done.stdout)["sbatch"]
    assert {"--gres=gpu:4", "--partition=gpu", "--account=acct"} <= set(sbatch) and sbatch[-1].endswith("ray.sub")


def test_the_sidecar_command_loads_back_as_the_launch_config():
    """ray.sub runs SANDBOX_COMMAND as is: its overrides must rebuild the same topology on each node."""
    overrides = ["topology.gateway_port=6100", "topology.capacity.run=4", "polar.container=img"]
    cfg = load(LaunchConfig, "launch", overrides)
    p = plan(cfg, 2, RECIPE, [], overrides)
    argv = p["ray_sub"]["env"]["SANDBOX_COMMAND"].split()
    again = load(LaunchConfig, "launch", argv[3:])
    assert again.topology == cfg.topology


def test_each_node_runs_configs_our_servers_accept(monkeypatch):
    monkeypatch.setenv("POLAR_CONTROL_TOKEN", "minted-by-the-launch")  # listening beyond loopback needs it
    cfg = load(LaunchConfig, "launch", [])
    first = dict(sidecar_commands(cfg, "gpu-a", "gpu-a"))
    other = dict(sidecar_commands(cfg, "gpu-b.cluster.local", "gpu-a"))
    assert list(first) == ["rollout", "gateway"] and list(other) == ["gateway"]
    assert load(RolloutConfig, "rollout", first["rollout"][2:]).public_url == "http://gpu-a:6001"
    monkeypatch.delenv("POLAR_CONTROL_TOKEN")
    with pytest.raises(ConfigError, match="control_token"):  # a rollout server open to the cluster is refused
        load(RolloutConfig, "rollout", first["rollout"][2:])
    g = load(GatewayConfig, "gateway", other["gateway"][2:])
    assert g.node.rollout_url == "http://gpu-a:6001" and g.proxy.port == 6000 and g.proxy.upstream.engine == "nemo_rl"
    assert g.proxy.upstream.sampling == {"temperature": 1.0, "top_p": 1.0} and g.node.capacity.run == 32
    assert not any("token" in a for a in first["rollout"] + other["gateway"])  # tokens travel by environment


def test_the_control_token_reaches_servers_through_the_environment(monkeypatch):
    monkeypatch.setenv("POLAR_CONTROL_TOKEN", "t0k3n")
    assert load(RolloutConfig, "rollout", []).control_token == "t0k3n"
    assert load(GatewayConfig, "gateway", []).node.control_token == "t0k3n"


def test_a_release_that_ignores_mask_sample_is_refused():
    done = _launch("--nodes", "2", "--dry-run", "--no-check", IMAGE, "nemo_rl.container=nvcr.io/nvidia/nemo-rl:v0.7.0")
    assert done.returncode == 2 and "mask_sample" in done.stderr


def test_ports_stay_in_the_band_ray_sub_leaves_to_its_sidecar():
    with pytest.raises(ValueError, match="6000-6999"):
        TopologyConfig(gateway_port=8800)
    done = _launch("--nodes", "2", "--dry-run", "--no-check", IMAGE, "topology.rollout_port=8900")
    assert done.returncode == 2 and "rollout_port" in done.stderr


def test_the_sidecar_refuses_to_listen_beyond_loopback_without_a_token():
    env = {k: v for k, v in os.environ.items() if k != "POLAR_CONTROL_TOKEN"} | {"SLURM_MASTER_NODE": "node-0"}
    done = subprocess.run(
        [sys.executable, "-m", "nemo_polar.cli", "launch", "sidecar"], capture_output=True, text=True, env=env
    )
    assert done.returncode == 2 and "control token" in done.stderr


@requires_nemo_rl
def test_a_bad_recipe_override_stops_the_launch_before_sbatch():
    done = _launch("--nodes", "2", "--dry-run", IMAGE, "grpo.num_prompts_per_stpe=4")
    assert done.returncode == 2 and "grpo.num_prompts_per_stpe" in done.stderr


def test_overrides_are_split_by_section():
    recipe, launch = split_overrides(
        ["grpo.seed=1", "++logger.wandb.name=x", "topology.rollout_port=6002", "slurm.time=1", "polar.container=x"]
    )
    assert recipe == ["grpo.seed=1", "++logger.wandb.name=x"]
    assert launch == ["topology.rollout_port=6002", "slurm.time=1", "polar.container=x"]


def test_learn_makes_polar_learn_the_driver_and_every_gateway_serve_its_vllm(monkeypatch):
    """--learn: the driver's command is `polar learn` on the job's rollout server (its overrides, not a recipe's),
    loaded back by polar learn's own config; every gateway samples polar learn's vLLM at the trainer's pair."""
    done = subprocess.run(
        [sys.executable, "-m", "nemo_polar.cli", "launch", "slurm", "--nodes", "2", "--learn", "--dry-run", "--json",
         IMAGE, "steps=6", "samples=4"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    p = json.loads(done.stdout)
    env = p["ray_sub"]["env"]
    assert (p["driver"], p["recipe"], env["CONTAINER"]) == ("learn", None, "registry.example/nemo-polar:1")
    assert "driver=learn" in env["SANDBOX_COMMAND"]  # the sidecars compose the same launch config
    argv = shlex.split(env["COMMAND"].split(" && ", 1)[1])
    at = argv.index("learn")
    assert argv[at - 1] == "polar" and argv[-1] == "rollout_url=http://$(hostname):6001"
    learn_cfg = load(LearnConfig, "learn", argv[at + 2 : -1] + ["rollout_url=http://head:6001"])
    assert (learn_cfg.steps, learn_cfg.samples, learn_cfg.serve_host) == (6, 4, "0.0.0.0")
    assert learn_cfg.node_records.endswith("/nodes/*/records.sqlite") and learn_cfg.run_dir.endswith("/learn")
    monkeypatch.setenv("POLAR_CONTROL_TOKEN", "minted-by-the-launch")
    gateway = dict(sidecar_commands(load(LaunchConfig, "launch", ["driver=learn"]), "gpu-b", "gpu-a"))["gateway"]
    g = load(GatewayConfig, "gateway", gateway[2:])
    assert g.proxy.upstream.engine == "vllm" and g.proxy.upstream.sampling == SAMPLING
    assert g.proxy.upstream.policy_version == FIRST_VERSION


def test_a_launch_without_a_recipe_or_with_a_bad_learn_override_is_refused_before_sbatch():
    launch = [sys.executable, "-m", "nemo_polar.cli", "launch", "slurm", "--nodes", "2", "--dry-run", IMAGE]
    done = subprocess.run(launch, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--recipe" in done.stderr
    done = subprocess.run(launch + ["--learn", "stpes=3"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "stpes" in done.stderr
