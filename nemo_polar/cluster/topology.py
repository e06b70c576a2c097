"""Which node runs what, as data: NeMo-RL's ray.sub runs training, and its per-node sidecar runs ours.

ray.sub starts `SANDBOX_COMMAND` in `SANDBOX_CONTAINER` on every node of the allocation and holds the
training driver until each node's sidecar listens on `NEMO_SKILLS_SANDBOX_PORT`. Our sidecar
(`polar launch sidecar`) is the rollout server on the first node (`SLURM_MASTER_NODE`) and a gateway node
on every node, the gateway listening on that port. Our ports sit in the band ray.sub leaves to the sidecar
(6000-6999), clear of its vLLM, Ray and Gym bands.

With `driver: learn` (`polar launch slurm --learn`) the driver is `polar learn`'s CPU loop instead: vLLM on the
first node, the sessions dispatched by the job's rollout server to the gateways of every node.

`plan()` and `sidecar_commands()` are pure: a dry run prints exactly what ray.sub and each node would run.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from ..config import Strict
from ..contracts import NodeCapacity
from ..nemo_rl.versions import CONTAINER

SIDECAR_BAND = range(6000, 7000)  # ray.sub's port layout: sandbox nginx 6000, its workers 6001-6999
LAUNCH_SECTIONS = ("topology", "slurm", "nemo_rl", "polar", "run_dir", "driver")  # the others: the recipe's
TOKEN_ENV = "POLAR_CONTROL_TOKEN"


class TopologyConfig(Strict):
    """`conf/topology/*.yaml`."""

    gateway_port: int = Field(6000, description="every node's proxy; ray.sub's sidecar readiness port")
    rollout_port: int = Field(6001, description="the rollout server, on the first node")
    bind_host: str = Field(
        "0.0.0.0", description="the address the rollout server and every proxy listen on (0.0.0.0: every interface)"
    )
    capacity: NodeCapacity = NodeCapacity()
    proxy: str = Field("cluster", description="the proxy group option of every gateway")
    backend: str = Field("nemo_rl", description="the backend group option of every gateway")
    upstream_url: str = Field("http://{host}:8000", description="a gateway's own upstream; tasks name NeMo-RL's")
    store_dir: str = Field(
        "runs/cluster",
        description="the rollout server's and nodes' stores, on a filesystem every node shares (mounted in the jobs)",
    )

    @model_validator(mode="after")
    def _ports(self) -> TopologyConfig:
        for key in ("gateway_port", "rollout_port"):
            if getattr(self, key) not in SIDECAR_BAND:
                raise ValueError(
                    f"{key}={getattr(self, key)}: must be in 6000-6999, the band ray.sub leaves to its sidecar"
                )
        if self.gateway_port == self.rollout_port:
            raise ValueError("gateway_port and rollout_port must differ (both run on the first node)")
        return self


class SlurmConfig(Strict):
    account: str | None = Field(
        None, description="sbatch --account (null: the user's default account, asked of the cluster at submit)"
    )
    partition: str | None = Field(None, description="sbatch --partition (null: the cluster's default partition)")
    time: str = Field("04:00:00", description="sbatch --time: the job's wall-clock limit, HH:MM:SS")
    job_name: str = Field("polar-grpo", description="sbatch --job-name")
    gpus_per_node: int = Field(
        8, ge=1, description="GPUs of each node: ray.sub's GPUS_PER_NODE and the recipe's cluster.gpus_per_node"
    )
    gres: bool | None = Field(
        None, description="--gres=gpu:N: null where the partition's nodes have GPU GRES (ray.sub's own rule)"
    )
    extra_args: list[str] = Field(
        default_factory=list, description="more sbatch arguments, as given (e.g. [--exclusive, --qos=high])"
    )


class NemoRLConfig(Strict):
    dir: str = Field("/opt/nemo-rl", description="a NeMo-RL checkout on a shared filesystem (holds ray.sub)")
    container: str = Field(CONTAINER, description="an image of that checkout's commit (nemo_polar.nemo_rl.versions)")
    mounts: list[str] = Field(
        default_factory=list,
        description="more container mounts, SRC:DST each (the checkout, this repository and the stores are mounted)",
    )
    entry: str = Field(
        "examples/nemo_gym/run_grpo_nemo_gym.py",
        description="the driver, relative to `dir`, run as `uv run <entry> --config <recipe>` on the first node",
    )


class PolarConfig(Strict):
    command: str = Field(
        "polar", description="how the jobs run polar inside the containers (split like a shell; e.g. `uv run polar`)"
    )
    container: str | None = Field(None, description="required to submit: the sidecar's image (nemo_polar, harnesses)")
    gym_root: str = Field(
        "gym", description="the Gym plugin's root, NEMO_GYM_EXTRA_ROOTS of the driver (relative: to this repository)"
    )


class LaunchConfig(Strict):
    """`conf/launch.yaml`."""

    run_dir: str = Field(
        "runs/launch", description="the job's logs (ray.sub's BASE_LOG_DIR, slurm-<jobid>.out); on a shared filesystem"
    )
    driver: Literal["nemo_rl", "learn"] = Field(
        "nemo_rl", description="the job's driver: NeMo-RL's GRPO on the recipe, or polar learn's CPU loop (--learn)"
    )
    topology: TopologyConfig = Field(
        TopologyConfig(), description="where the rollout server and the gateways run (topology=single|slurm)"
    )
    slurm: SlurmConfig = SlurmConfig()
    nemo_rl: NemoRLConfig = NemoRLConfig()
    polar: PolarConfig = PolarConfig()


REPO = Path(__file__).resolve().parents[2]


def split_overrides(overrides: list[str]) -> tuple[list[str], list[str]]:
    """(recipe overrides, launch overrides): a launch override's first key is one of ours."""
    recipe, launch = [], []
    for item in overrides:
        head = item.lstrip("+~").split("=", 1)[0].split(".", 1)[0]
        (launch if head in LAUNCH_SECTIONS else recipe).append(item)
    return recipe, launch


def sidecar_commands(cfg: LaunchConfig, host: str, master: str) -> list[tuple[str, list[str]]]:
    """What one node runs: (name, argv) for the rollout server (first node only), then its gateway.
    The control token is never in an argv: every process reads it from POLAR_CONTROL_TOKEN."""
    topo, polar = cfg.topology, shlex.split(cfg.polar.command)
    store = Path(topo.store_dir).resolve()
    rollout_url = f"http://{master}:{topo.rollout_port}"
    out = []
    if host.split(".")[0] == master.split(".")[0]:
        rollout = ["serve-rollout", f"host={topo.bind_host}", f"port={topo.rollout_port}"]
        rollout += [f"public_url={rollout_url}", f"store.path={store / 'rollout.sqlite'}"]
        out.append(("rollout", polar + rollout))
    c = topo.capacity
    gateway = [
        "serve-gateway",
        f"proxy={topo.proxy}",
        f"backend={'vllm' if cfg.driver == 'learn' else topo.backend}",  # learn: polar learn's own vLLM
        f"node.node_id={host}",
        f"node.rollout_url={rollout_url}",
        f"node.public_url=http://{host}:{topo.gateway_port}",
        f"node.root={store / 'nodes' / host}",
        f"node.capacity={{init: {c.init}, run: {c.run}, postrun: {c.postrun}, ready: {c.ready}}}",
        f"proxy.host={topo.bind_host}",
        f"proxy.port={topo.gateway_port}",
        f"proxy.store.path={store / 'nodes' / host / 'records.sqlite'}",
        f"proxy.upstream.url={topo.upstream_url.format(host=host)}",
    ]
    if cfg.driver == "learn":  # sampled at the trainer's pair by every proxy
        from ..learn.config import FIRST_VERSION, SAMPLING

        gateway += ["proxy.upstream.sampling={" + ", ".join(f"{k}: {v}" for k, v in SAMPLING.items()) + "}"]
        gateway += [f"proxy.upstream.policy_version='{FIRST_VERSION}'"]  # a string, never read as a number
    out.append(("gateway", polar + gateway))
    return out


def _mounts(dirs: list[str], extra: list[str]) -> str:
    return ",".join([f"{d}:{d}" for d in dict.fromkeys(dirs)] + list(extra))


def grpo_argv(cfg: LaunchConfig, recipe: Path, overrides: list[str]) -> list[str]:
    """NeMo-RL's Gym GRPO entry point on a recipe, as its examples run it from the checkout."""
    return ["uv", "run", cfg.nemo_rl.entry, "--config", str(recipe)] + list(overrides)


def driver_command(cfg: LaunchConfig, workdir: str, train: list[str], rollout_url: str) -> str:
    """The driver's shell command: in `workdir`, with what it needs of us (NeMo-RL's checkout, our Gym plugin root,
    the rollout server's URL, left unquoted so that a `$(hostname)` in it expands), `train`."""
    gym_root = Path(cfg.polar.gym_root)
    gym_root = gym_root if gym_root.is_absolute() else REPO / gym_root
    env = {
        "NEMO_RL_DIR": shlex.quote(cfg.nemo_rl.dir),
        "NEMO_GYM_EXTRA_ROOTS": shlex.quote(str(gym_root)),
        "POLAR_ROLLOUT_URL": rollout_url,
    }
    return f"cd {shlex.quote(workdir)} && " + " ".join(f"{k}={v}" for k, v in env.items()) + " " + shlex.join(train)


def plan(
    cfg: LaunchConfig,
    nodes: int,
    recipe: str | Path | None,
    recipe_overrides: list[str],
    launch_overrides: tuple[str, ...] | list[str] = (),
) -> dict[str, Any]:
    """Everything a launch does, as data: ray.sub's environment, the sbatch command, each node's sidecar."""
    topo = cfg.topology
    recipe = Path(recipe).resolve() if recipe is not None else None
    store = str(Path(topo.store_dir).resolve())
    rollout_url = f"http://$(hostname):{topo.rollout_port}"  # the driver runs on the first node, as the server
    if cfg.driver == "learn":
        overrides = list(recipe_overrides) + ([f"recipe={recipe}"] if recipe is not None else [])
        train = shlex.split(cfg.polar.command) + ["learn", "--json", "serve_host=0.0.0.0"]
        train += [f"run_dir={Path(cfg.run_dir).resolve() / 'learn'}", f"node_records={store}/nodes/*/records.sqlite"]
        train += overrides
        workdir, container = str(REPO), cfg.polar.container or ""
    else:
        assert recipe is not None, "NeMo-RL's GRPO needs a recipe"
        overrides = [f"cluster.num_nodes={nodes}", f"cluster.gpus_per_node={cfg.slurm.gpus_per_node}"]
        overrides += list(recipe_overrides)
        train = grpo_argv(cfg, recipe, overrides)
        workdir, container = cfg.nemo_rl.dir, cfg.nemo_rl.container
    command = driver_command(cfg, workdir, train, rollout_url)
    if cfg.driver == "learn":  # the rollout server's URL as polar learn's own setting (its $(hostname) expanded)
        command += f" rollout_url={rollout_url}"
    # the sidecar composes the same launch config from the same overrides
    sidecar = shlex.split(cfg.polar.command) + ["launch", "sidecar"] + list(launch_overrides)
    env = {
        "COMMAND": command,
        "CONTAINER": container,
        "MOUNTS": _mounts(
            [cfg.nemo_rl.dir, str(REPO)] + ([str(recipe.parent)] if recipe else []) + [store], cfg.nemo_rl.mounts
        ),
        "GPUS_PER_NODE": str(cfg.slurm.gpus_per_node),
        "BASE_LOG_DIR": str(Path(cfg.run_dir).resolve()),
        "SANDBOX_CONTAINER": cfg.polar.container or "",
        "SANDBOX_COMMAND": shlex.join(sidecar),
        "SANDBOX_EXTRA_MOUNTS": _mounts([str(REPO), store], []),
        "NEMO_SKILLS_SANDBOX_PORT": str(topo.gateway_port),
    }
    # Unset partition, account and gres (null) are the cluster's, asked at submit (slurm.py); the job's own log
    # goes beside ray.sub's <jobid>-logs/.
    sbatch = ["sbatch", f"--nodes={nodes}", f"--time={cfg.slurm.time}", f"--job-name={cfg.slurm.job_name}"]
    sbatch += [f"--output={Path(cfg.run_dir).resolve() / 'slurm-%j.out'}"]
    sbatch += [f"--gres=gpu:{cfg.slurm.gpus_per_node}"] if cfg.slurm.gres else []
    sbatch += [f"--account={cfg.slurm.account}"] if cfg.slurm.account else []
    sbatch += [f"--partition={cfg.slurm.partition}"] if cfg.slurm.partition else []
    sbatch += list(cfg.slurm.extra_args) + [str(Path(cfg.nemo_rl.dir) / "ray.sub")]
    hosts = [f"node-{i}" for i in range(nodes)]  # SLURM names them; the sidecar reads its own
    per_node = [
        {"index": i, "host": h, "commands": [{"name": n, "argv": a} for n, a in sidecar_commands(cfg, h, hosts[0])]}
        for i, h in enumerate(hosts)
    ]
    return {
        "nodes": nodes,
        "driver": cfg.driver,
        "recipe": str(recipe) if recipe else None,
        "recipe_overrides": overrides,
        "urls": {"rollout": f"http://<first node>:{topo.rollout_port}", "gateway_port": topo.gateway_port},
        "ray_sub": {"env": env, "token_env": TOKEN_ENV},
        "sbatch": sbatch,
        "per_node": per_node,
    }
