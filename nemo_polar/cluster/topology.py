"""Which node runs what: the rollout server on one node, a gateway per node, NeMo-RL's ray.sub for training.

`plan()` is pure: hosts, ports, URLs and every command as argv, so a dry run prints exactly what a node would run.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from pydantic import Field

from ..config import Strict
from ..recipes.schema import POLAR_AGENT_PATH, SECTIONS
from ..server.contracts import NodeCapacity


class TopologyConfig(Strict):
    """`conf/topology/*.yaml`."""

    rollout_node: int = Field(0, ge=0)
    rollout_port: int = Field(8900, ge=1, le=65535)
    gateway_port: int = Field(8800, ge=1, le=65535)
    bind_host: str = "0.0.0.0"
    gateway_per_node: bool = True
    capacity: NodeCapacity = NodeCapacity()
    proxy: str = Field("cluster", description="the proxy group option of every gateway")
    backend: str = Field("nemo_rl", description="the backend group option of every gateway")
    upstream_url: str = Field("http://{host}:8000", description="{host}: the gateway's node")
    store_dir: str = "runs/cluster"
    control_token: str | None = None
    ready_timeout_s: float = Field(900, gt=0)


class SlurmConfig(Strict):
    account: str | None = None
    partition: str | None = None
    time: str = "04:00:00"
    job_name: str = "polar-grpo"
    gpus_per_node: int = Field(8, ge=1)
    extra_args: list[str] = Field(default_factory=list)


class NemoRLConfig(Strict):
    dir: str = "/opt/nemo-rl"
    container: str = "nvcr.io/nvidia/nemo-rl:v0.7.0"
    mounts: list[str] = Field(default_factory=list)
    entry: str = "examples/nemo_gym/run_grpo_nemo_gym.py"


class PolarConfig(Strict):
    command: str = "polar"
    container: str | None = None
    gym_root: str = "gym"


class LaunchConfig(Strict):
    """`conf/launch.yaml`."""

    run_dir: str = "runs/launch"
    topology: TopologyConfig = TopologyConfig()
    slurm: SlurmConfig = SlurmConfig()
    nemo_rl: NemoRLConfig = NemoRLConfig()
    polar: PolarConfig = PolarConfig()


REPO = Path(__file__).resolve().parents[2]
SBATCH = REPO / "slurm" / "polar_grpo.sbatch"


def split_overrides(overrides: list[str]) -> tuple[list[str], list[str]]:
    """(recipe overrides, launch overrides): a recipe override's first key is a NeMo-RL section."""
    recipe, launch = [], []
    for item in overrides:
        head = item.lstrip("+~").split("=", 1)[0].split(".", 1)[0]
        (recipe if head in SECTIONS else launch).append(item)
    return recipe, launch


def placeholder_hosts(nodes: int) -> list[str]:
    return [f"node-{i}" for i in range(nodes)]


def _srun(cfg: LaunchConfig, host: str, argv: list[str]) -> list[str]:
    out = ["srun", "--overlap", "--nodes=1", "--ntasks=1", f"--nodelist={host}"]
    if cfg.polar.container:
        out += [
            f"--container-image={cfg.polar.container}",
            f"--container-mounts={_mounts(cfg)}",
            "--no-container-mount-home",
        ]
    return out + argv


def _mounts(cfg: LaunchConfig, recipe: Path | None = None) -> str:
    dirs = [cfg.nemo_rl.dir, str(REPO)] + ([str(recipe.parent)] if recipe else [])
    pairs = [f"{d}:{d}" for d in dict.fromkeys(dirs)] + list(cfg.nemo_rl.mounts)
    return ",".join(pairs)


def plan(
    cfg: LaunchConfig, nodes: int, recipe: str | Path, recipe_overrides: list[str], hosts: list[str] | None = None
) -> dict[str, Any]:
    """Everything a launch does, as data: per-node commands, readiness checks, the ray.sub invocation, sbatch."""
    topo = cfg.topology
    hosts = list(hosts or placeholder_hosts(nodes))
    if len(hosts) != nodes:
        raise ValueError(f"--nodes {nodes} but {len(hosts)} hosts: {hosts}")
    if topo.rollout_node >= nodes:
        raise ValueError(f"topology.rollout_node={topo.rollout_node} is not one of {nodes} nodes")
    recipe = Path(recipe).resolve()
    store = Path(topo.store_dir).resolve()
    head = hosts[topo.rollout_node]
    rollout_url = f"http://{head}:{topo.rollout_port}"
    polar = shlex.split(cfg.polar.command)
    token = [f"control_token={topo.control_token}"] if topo.control_token else []
    per_node: list[dict[str, Any]] = [{"index": i, "host": h, "commands": []} for i, h in enumerate(hosts)]

    rollout = (
        polar
        + [
            "serve-rollout",
            f"host={topo.bind_host}",
            f"port={topo.rollout_port}",
            f"public_url={rollout_url}",
            f"store.path={store / 'rollout.sqlite'}",
        ]
        + token
    )
    per_node[topo.rollout_node]["commands"].append(
        {"name": "rollout", "argv": rollout, "srun": _srun(cfg, head, rollout), "url": rollout_url}
    )
    gateways = []
    for i, host in enumerate(hosts):
        if not topo.gateway_per_node and i != topo.rollout_node:
            continue
        public = f"http://{host}:{topo.gateway_port}"
        c = topo.capacity
        argv = (
            polar
            + [
                "serve-gateway",
                f"proxy={topo.proxy}",
                f"backend={topo.backend}",
                f"node.node_id={host}",
                f"node.rollout_url={rollout_url}",
                f"node.public_url={public}",
                f"node.root={store / 'nodes' / host}",
                f"node.capacity={{init: {c.init}, run: {c.run}, postrun: {c.postrun}, ready: {c.ready}}}",
                f"proxy.host={topo.bind_host}",
                f"proxy.port={topo.gateway_port}",
                f"proxy.store.path={store / 'nodes' / host / 'records.sqlite'}",
                f"proxy.upstream.url={topo.upstream_url.format(host=host)}",
            ]
            + ([f"node.control_token={topo.control_token}"] if topo.control_token else [])
        )
        per_node[i]["commands"].append(
            {"name": "gateway", "argv": argv, "srun": _srun(cfg, host, argv), "url": public}
        )
        gateways.append(host)

    overrides = [
        f"cluster.num_nodes={nodes}",
        f"cluster.gpus_per_node={cfg.slurm.gpus_per_node}",
        f"{POLAR_AGENT_PATH}.rollout_url={rollout_url}",
    ] + list(recipe_overrides)
    train = ["uv", "run", cfg.nemo_rl.entry, "--config", str(recipe)] + overrides
    gym_root = Path(cfg.polar.gym_root)
    gym_root = gym_root if gym_root.is_absolute() else REPO / gym_root
    command = f"cd {shlex.quote(cfg.nemo_rl.dir)} && NEMO_GYM_EXTRA_ROOTS={shlex.quote(str(gym_root))} " + shlex.join(
        train
    )
    ray_env = {
        "COMMAND": command,
        "CONTAINER": cfg.nemo_rl.container,
        "MOUNTS": _mounts(cfg, recipe),
        "GPUS_PER_NODE": str(cfg.slurm.gpus_per_node),
        "BASE_LOG_DIR": str(Path(cfg.run_dir).resolve()),
    }
    ray_sub = str(Path(cfg.nemo_rl.dir) / "ray.sub")
    sbatch = ["sbatch", f"--nodes={nodes}", f"--gres=gpu:{cfg.slurm.gpus_per_node}", f"--time={cfg.slurm.time}"]
    sbatch += [f"--job-name={cfg.slurm.job_name}"]
    sbatch += [f"--account={cfg.slurm.account}"] if cfg.slurm.account else []
    sbatch += [f"--partition={cfg.slurm.partition}"] if cfg.slurm.partition else []
    sbatch += list(cfg.slurm.extra_args) + [str(SBATCH)]
    return {
        "nodes": nodes,
        "hosts": hosts,
        "recipe": str(recipe),
        "urls": {"rollout": rollout_url, "gateways": {h: f"http://{h}:{topo.gateway_port}" for h in gateways}},
        "per_node": per_node,
        "readiness": [
            {"check": "rollout_health", "url": f"{rollout_url}/health", "timeout_s": topo.ready_timeout_s},
            {"check": "gateways_registered", "url": f"{rollout_url}/nodes", "expect": gateways},
        ],
        "training": {"argv": ["bash", ray_sub], "env": ray_env, "recipe_overrides": overrides},
        "sbatch": sbatch,
    }
