"""`polar launch slurm`: submit (sbatch slurm/polar_grpo.sbatch), run inside the allocation, or dry-run.

Inside the allocation (the batch script, on the first node): start the rollout server and one gateway per node
with `srun --overlap`, wait for the rollout server's /health and every gateway's registration, then run NeMo-RL's
ray.sub (COMMAND = the Gym GRPO entry point on the recipe). The services it started stop when training ends.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from ..errors import ConfigError
from .topology import LaunchConfig, plan


def recipe_errors(recipe: str | Path, overrides: list[str]) -> list[dict[str, str]]:
    from ..recipes.check import check_recipe

    return check_recipe(recipe, overrides)


def render_text(p: dict[str, Any]) -> str:
    """The dry run for people: each node's commands, the readiness checks, ray.sub, sbatch."""
    lines = [f"# {p['nodes']} nodes, recipe {p['recipe']}", f"# rollout server: {p['urls']['rollout']}"]
    for node in p["per_node"]:
        lines.append(f"\n## node {node['index']} ({node['host']})")
        lines += [f"[{c['name']}] {shlex.join(c['srun'])}" for c in node["commands"]]
    lines.append("\n## wait for")
    for r in p["readiness"]:
        lines.append(f"{r['check']}: GET {r['url']}" + (f" lists {', '.join(r['expect'])}" if "expect" in r else ""))
    lines.append("\n## training (NeMo-RL ray.sub, on the whole allocation)")
    env = p["training"]["env"]
    lines += [f"{k}={shlex.quote(v)} \\" for k, v in env.items()]
    lines.append(shlex.join(p["training"]["argv"]))
    lines.append("\n## submit")
    lines.append(shlex.join(p["sbatch"]))
    return "\n".join(lines)


def submit(p: dict[str, Any], launch_args: list[str]) -> str:
    env = os.environ | {"POLAR_LAUNCH_ARGS": shlex.join(launch_args)}
    out = subprocess.run(p["sbatch"], env=env, capture_output=True, text=True, check=False)
    if out.returncode:
        raise ConfigError(f"sbatch failed ({out.returncode}): {out.stderr.strip()}")
    return out.stdout.strip()


def allocation_hosts() -> list[str]:
    nodelist = os.environ.get("SLURM_JOB_NODELIST")
    if not nodelist:
        raise ConfigError("--in-allocation needs SLURM_JOB_NODELIST (run it from slurm/polar_grpo.sbatch)")
    out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=True)
    return out.stdout.split()


def wait_ready(p: dict[str, Any], timeout_s: float, procs: list[subprocess.Popen]) -> None:
    health, registered = p["readiness"]
    want = set(registered["expect"])
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        dead = [proc.args for proc in procs if proc.poll() is not None]
        if dead:
            raise RuntimeError(f"a service exited before training started: {dead[0]}")
        try:
            if httpx.get(health["url"], timeout=5).status_code == 200:
                rows = httpx.get(registered["url"], timeout=5).json()["nodes"]
                if want <= {n.get("node_id") for n in rows if n.get("healthy", True)}:
                    return
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            pass
        time.sleep(2)
    raise RuntimeError(f"not ready after {timeout_s:.0f}s: {health['url']} and gateways {sorted(want)}")


def run_in_allocation(cfg: LaunchConfig, p: dict[str, Any]) -> int:
    Path(cfg.topology.store_dir).mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen] = []
    try:
        for node in p["per_node"]:
            for c in node["commands"]:
                print(f"polar launch: node {node['index']} {c['name']}: {shlex.join(c['argv'])}", flush=True)
                procs.append(subprocess.Popen(c["srun"], start_new_session=True))
        wait_ready(p, cfg.topology.ready_timeout_s, procs)
        print(f"polar launch: rollout server and {len(p['readiness'][1]['expect'])} gateways ready", flush=True)
        env = os.environ | p["training"]["env"]
        return subprocess.run(p["training"]["argv"], env=env, check=False).returncode
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def main_slurm(
    cfg: LaunchConfig,
    *,
    nodes: int,
    recipe: str,
    recipe_overrides: list[str],
    launch_args: list[str],
    dry_run: bool,
    in_allocation: bool,
    hosts: list[str] | None,
    check: bool,
) -> tuple[int, dict | None]:
    """(exit code, the plan when it should be printed)."""
    if check:
        errors = recipe_errors(recipe, recipe_overrides)
        if errors:
            raise ConfigError("recipe check failed:\n  " + "\n  ".join(f"{e['key']}: {e['message']}" for e in errors))
    if in_allocation:
        p = plan(cfg, nodes, recipe, recipe_overrides, hosts or allocation_hosts())
        return run_in_allocation(cfg, p), None
    p = plan(cfg, nodes, recipe, recipe_overrides, hosts)
    if dry_run:
        return 0, p
    print(submit(p, launch_args), file=sys.stderr)
    return 0, p
