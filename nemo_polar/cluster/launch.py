"""`polar launch slurm` (submit NeMo-RL's ray.sub, or dry-run it) and `polar launch sidecar` (one node's part).

Submitting: the recipe is checked by NeMo-RL's own code, the NeMo-RL image is checked against the tested
version set, a control token is minted (every process reads it from POLAR_CONTROL_TOKEN, never from an argv),
and `sbatch ray.sub` runs with ray.sub's environment: COMMAND (NeMo-RL's Gym GRPO entry point on the recipe, or
with `--learn` polar learn's CPU loop) in CONTAINER, and our sidecar (SANDBOX_COMMAND in SANDBOX_CONTAINER) on
every node.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..nemo_rl.versions import NEMO_RL_COMMIT, ignores_mask_sample
from ..sandbox import stop_group
from . import slurm
from .topology import TOKEN_ENV, LaunchConfig, driver_command, grpo_argv, plan, sidecar_commands


def render_text(p: dict[str, Any]) -> str:
    """The dry run for people: what each node's sidecar runs, ray.sub's environment, the sbatch command."""
    driver = f"recipe {p['recipe']}" if p["driver"] == "nemo_rl" else "polar learn"
    lines = [f"# {p['nodes']} nodes, {driver}", f"# rollout server: {p['urls']['rollout']}"]
    for node in p["per_node"]:
        lines.append(f"\n## node {node['index']} ({node['host']}), ray.sub's sidecar")
        lines += [f"[{c['name']}] {shlex.join(c['argv'])}" for c in node["commands"]]
    lines.append(f"\n## NeMo-RL's ray.sub on the allocation (and {p['ray_sub']['token_env']}, minted at submit)")
    lines += [f"{k}={shlex.quote(v)} \\" for k, v in p["ray_sub"]["env"].items()]
    lines.append(shlex.join(p["sbatch"]))
    lines.append(
        "# at submit, what the command leaves unset is the cluster's: --partition, --account, --gres (slurm.py)"
    )
    return "\n".join(lines)


def check_images(cfg: LaunchConfig) -> None:
    if cfg.driver == "nemo_rl" and ignores_mask_sample(cfg.nemo_rl.container):
        raise ConfigError(
            f"nemo_rl.container={cfg.nemo_rl.container}: that NeMo-RL release ignores instance_config.mask_sample, "
            f"so infrastructure failures would train as reward 0; use an image of NeMo-RL {NEMO_RL_COMMIT[:7]} "
            "or later (docs/training.md)"
        )
    if not cfg.polar.container:
        raise ConfigError(
            "polar.container: the image the sidecar runs in (nemo_polar, its harnesses) is required; "
            "docker/sidecar.Dockerfile builds it (docs/gpu_cluster.md)"
        )


def check_recipe(recipe: str | Path, overrides: list[str]) -> None:
    from ..recipes import check_recipe as judged

    errors = judged(recipe, overrides)
    if errors:
        raise ConfigError("recipe check failed:\n  " + "\n  ".join(f"{e['key']}: {e['message']}" for e in errors))


def main_slurm(
    cfg: LaunchConfig,
    *,
    nodes: int,
    recipe: str | None,
    recipe_overrides: list[str],
    launch_overrides: list[str],
    dry_run: bool,
    check: bool,
    wait: bool = False,
) -> dict[str, Any]:
    """The plan; unless `dry_run`, submitted with `sbatch` (the options the config leaves unset asked of the
    cluster first) and, with `wait`, followed to the job's end. The plan gains `job`: its id, log, state, and
    for `driver: learn`, polar learn's summary (`learn`). `recipe`: NeMo-RL's; with `driver: learn`, the one its
    loss reads (optional), `recipe_overrides` then being polar learn's overrides."""
    check_images(cfg)
    if cfg.driver == "nemo_rl" and recipe is None:
        raise ConfigError("--recipe: NeMo-RL's GRPO runs a recipe (or --learn: polar learn's loop)")
    if check and cfg.driver == "nemo_rl":
        check_recipe(recipe, recipe_overrides)
    if cfg.driver == "learn":  # polar learn's overrides, refused here rather than in the job
        from ..config import load
        from ..learn.config import LearnConfig

        load(LearnConfig, "learn", recipe_overrides)
    p = plan(cfg, nodes, recipe, recipe_overrides, launch_overrides)
    if dry_run:
        return p
    p["sbatch"][-1:-1] = slurm.cluster_args(cfg.slurm, cfg.slurm.gpus_per_node)
    run_dir = Path(cfg.run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)  # sbatch's --output and ray.sub's logs go there
    env = os.environ | p["ray_sub"]["env"] | {TOKEN_ENV: os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(32)}
    started = time.monotonic()
    job_id = slurm.submit(p["sbatch"], env)
    job = {
        "job_id": job_id,
        "slurm_out": str(run_dir / f"slurm-{job_id}.out"),
        "log_dir": str(run_dir / f"{job_id}-logs"),
    }
    print(f"submitted job {job_id}: {job['slurm_out']}, {job['log_dir']}/", file=sys.stderr, flush=True)
    if wait:
        end = slurm.follow(job_id)
        job |= {"job_state": end.state, "exit_code": end.exit_code, "state_from": end.source}
        job["seconds"] = round(time.monotonic() - started, 1)
        if cfg.driver == "learn":
            job["learn"] = _learn_summary(run_dir / "learn")
    return p | {"job": job}


def direct(cfg: LaunchConfig, recipe: str, overrides: list[str], rollout_url: str | None = None) -> dict[str, Any]:
    """NeMo-RL's own launch of a recipe, without Slurm: its Gym GRPO entry point run from its checkout on a machine
    (or a Ray cluster) of your own, our rollout server at `rollout_url` (default: this machine's, at the topology's
    port). `command` is the shell line; `argv`, the entry point's, within it."""
    url = rollout_url or f"http://$(hostname):{cfg.topology.rollout_port}"
    argv = grpo_argv(cfg, Path(recipe).resolve(), overrides)
    command = driver_command(cfg, cfg.nemo_rl.dir, argv, url if rollout_url is None else shlex.quote(url))
    return {"command": command, "cwd": cfg.nemo_rl.dir, "argv": argv, "token_env": TOKEN_ENV}


def main_direct(
    cfg: LaunchConfig, recipe: str, overrides: list[str], rollout_url: str | None, *, check: bool, run: bool
) -> dict[str, Any]:
    """`polar launch direct`: the command, after NeMo-RL's check of the recipe with those overrides; with `run`,
    executed here (its exit status in `exit_code`)."""
    if check:
        check_recipe(recipe, overrides)
    out = direct(cfg, recipe, overrides, rollout_url)
    if run:
        if not os.environ.get(TOKEN_ENV):
            print(f"{TOKEN_ENV} is not set: our Gym agent calls the rollout server without a token", file=sys.stderr)
        out["exit_code"] = subprocess.run(["bash", "-c", out["command"]], check=False).returncode
    return out


def _learn_summary(folder: Path) -> dict[str, Any] | None:
    """What polar learn wrote as the job's driver (its newest run folder's summary.json); None if it wrote none."""
    found = sorted(folder.glob("*/summary.json"))
    return json.loads(found[-1].read_text()) if found else None


def sidecar(cfg: LaunchConfig) -> int:
    """One node's part, as ray.sub's sidecar: the rollout server on the first node, a gateway on every node.
    Returns when one of them exits (the others are stopped) or on SIGTERM (all are stopped)."""
    master = os.environ.get("SLURM_MASTER_NODE")
    if not master:
        raise ConfigError("polar launch sidecar runs under ray.sub, which sets SLURM_MASTER_NODE")
    if not os.environ.get(TOKEN_ENV) and cfg.topology.bind_host not in ("127.0.0.1", "localhost"):
        raise ConfigError(f"{TOKEN_ENV} is not set: no listening beyond loopback without a control token")
    host = socket.gethostname().split(".")[0]
    procs = []
    for name, argv in sidecar_commands(cfg, host, master):
        print(f"polar sidecar on {host}: {name}: {shlex.join(argv)}", flush=True)
        procs.append(subprocess.Popen(argv, start_new_session=True))
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    try:
        while not stopping and all(p.poll() is None for p in procs):
            time.sleep(1)
    finally:
        for p in procs:
            if p.poll() is None:
                stop_group(p)
    return next((p.returncode for p in procs if p.returncode), 0)
