"""NeMo-RL GRPO on a cluster: its recipes checked (`recipes check`), launched under SLURM with our rollout
server and gateways beside it (`launch slurm`), and each node's part there (`launch sidecar`); a Slurm cluster
on this machine to try it on (`cluster slurm up|down|status`)."""

from __future__ import annotations

import argparse
import json

from .parsing import ConfigFile

LAUNCH = ConfigFile("launch", "nemo_polar.cluster.topology:LaunchConfig")  # both launch commands read it


def _recipes_check(args: argparse.Namespace) -> int:
    from ..recipes.check import check

    report = check(args.recipe or None, args.overrides)
    if args.json:
        print(json.dumps(report))
    else:
        print(f"{report['recipes']} recipes, {len(report['errors'])} errors")
        for e in report["errors"]:
            print(f"  {e['recipe']}: {e['key']}: {e['message']}")
    return 0 if report["ok"] else 1


def _launch_slurm(args: argparse.Namespace) -> int:
    from ..cluster.launch import main_slurm, render_text
    from ..cluster.topology import split_overrides

    recipe_overrides, launch_overrides = split_overrides(args.overrides)
    launch_overrides += ["driver=learn"] if args.learn else []  # the sidecars read it too
    cfg = args.config.load(launch_overrides)
    plan = main_slurm(
        cfg,
        nodes=args.nodes,
        recipe=args.recipe,
        recipe_overrides=recipe_overrides,
        launch_overrides=launch_overrides,
        dry_run=args.dry_run,
        check=not args.no_check,
        wait=args.wait,
    )
    if args.dry_run:
        print(json.dumps(plan) if args.json else render_text(plan))
        return 0
    job = plan["job"]
    if args.json:
        print(json.dumps(job))
    elif args.wait:
        state = f"{job['job_state']} (exit {job['exit_code']}, from {job['state_from']})"
        print(f"job {job['job_id']}: {state} after {job['seconds']} s")
    else:
        print(job["job_id"])
    return 0 if job.get("job_state", "COMPLETED") == "COMPLETED" else 1


def _launch_direct(args: argparse.Namespace) -> int:
    from ..cluster.launch import main_direct
    from ..cluster.topology import split_overrides

    recipe_overrides, launch_overrides = split_overrides(args.overrides)
    cfg = args.config.load(launch_overrides)
    out = main_direct(cfg, args.recipe, recipe_overrides, args.rollout_url, check=not args.no_check, run=args.run)
    if args.json:
        print(json.dumps(out))
    elif not args.run:
        print(out["command"])
    return out.get("exit_code", 0)


def _launch_sidecar(args: argparse.Namespace) -> int:
    from ..cluster.launch import sidecar

    return sidecar(args.config.load(args.overrides))


def _cluster_slurm(args: argparse.Namespace) -> int:
    from ..cluster.testcluster import SlurmTestCluster

    c = SlurmTestCluster(args.root, gpus=args.gpus, mode=args.mode, nodes=args.nodes)
    if args.action == "up":
        c.up()
    elif args.action == "down":
        stopped = c.down()
        print(json.dumps({"stopped": stopped}) if args.json else f"stopped: {', '.join(stopped) or 'nothing'}")
        return 0
    alive = [f"{d.name} {d.pid}" for d in c.daemons() if d.alive()]
    nodes = c.client("sinfo", "-h", "-N", "-o", "%N %T %G", timeout=10).stdout.split("\n") if alive else []
    net = c.network()
    state = {
        "slurm_conf": str(c.conf),
        "daemons": alive,
        "nodes": [n for n in nodes if n],
        "jobs": c.jobs() if alive else [],
        "network": {k: net[k] for k in ("bridge", "subnet", "links")} if net else None,
        "env": str(c.root / "env.sh") if alive else None,  # what a launch needs here, written by `up`
    }
    if args.json:
        print(json.dumps(state))
    else:
        print(f"daemons: {', '.join(alive) or 'none'}; nodes: {'; '.join(state['nodes']) or 'none'}")
        if net:
            print(f"bridge {net['bridge']} ({net['subnet']}), links {', '.join(net['links'])}")
        print(
            f"source {state['env']}   # then polar launch slurm"
            if alive
            else f"(polar cluster slurm up --root {args.root})"
        )
    return 0 if alive else 1


def _tag(value: str) -> str:
    if "=" not in value or not all(value.split("=", 1)):
        raise argparse.ArgumentTypeError(f"{value!r}: NAME=LOCAL, e.g. debian:bookworm-slim=polar-bookworm:local")
    return value


def _cluster_docker(args: argparse.Namespace) -> int:
    from ..local.docker_engine import DockerEngine

    engine = DockerEngine(args.root)
    if args.action == "up":
        engine.up()
        tags = dict(t.split("=", 1) for t in args.tag)
        engine.tag(tags)
    elif args.action == "down":
        stopped = engine.down()
        print(json.dumps({"stopped": stopped}) if args.json else f"stopped: {', '.join(stopped) or 'nothing'}")
        return 0
    ready = engine.ready()
    images = engine.client("images", "--format", "{{.Repository}}:{{.Tag}}").stdout.decode().split() if ready else []
    state = {
        "ready": ready,
        "docker_host": engine.env["DOCKER_HOST"],
        "images": images,
        "containers": engine.containers(),
    }
    if args.json:
        print(json.dumps(state))
    elif ready:
        print(f"dockerd {engine.daemon().pid}; images: {', '.join(images) or 'none'}")  # type: ignore[union-attr]
        print(f"export DOCKER_HOST={state['docker_host']}")
    else:
        print(f"(polar cluster docker up --root {args.root})")
    return 0 if ready else 1


def register(sub: argparse._SubParsersAction) -> None:
    recipes = sub.add_parser("recipes", help="NeMo-RL GRPO recipes").add_subparsers(dest="action", required=True)
    rcheck = recipes.add_parser("check", help="load every recipe as NeMo-RL does and check each key")
    rcheck.add_argument("--json", action="store_true", help="one JSON object on one line")
    rcheck.add_argument("--recipe", action="append", default=[], help="a recipe file (repeatable; default: recipes/)")
    rcheck.add_argument("overrides", nargs="*", help="NeMo-RL overrides to check with, e.g. grpo.max_num_steps=10")
    rcheck.set_defaults(func=_recipes_check)

    launch = sub.add_parser("launch", help="launch training on a cluster").add_subparsers(dest="action", required=True)
    lslurm = launch.add_parser(
        "slurm", help="NeMo-RL GRPO (ray.sub) with our rollout server and gateways as its sidecar"
    )
    lslurm.add_argument("--nodes", type=int, required=True, help="nodes of the job (sbatch --nodes), each a gateway")
    lslurm.add_argument("--recipe", help="e.g. recipes/grpo-qwen3.5-4b-2n8g-megatron-polar-codex.yaml")
    lslurm.add_argument(
        "--learn",
        action="store_true",
        help="the driver is polar learn's CPU loop (the tiny model, vLLM on the first node, rollouts on every "
        "node's gateway); the overrides not ours are polar learn's (steps=6)",
    )
    lslurm.add_argument("--dry-run", action="store_true", help="print what each node would run; submit nothing")
    lslurm.add_argument("--wait", action="store_true", help="follow the job to its end; exit 0 only if COMPLETED")
    lslurm.add_argument(
        "--json", action="store_true", help="one JSON object: the plan (--dry-run) or the job (id, logs, state)"
    )
    lslurm.add_argument("--no-check", action="store_true", help="skip NeMo-RL's check of the recipe")
    lslurm.add_argument(
        "overrides",
        nargs="*",
        help="recipe overrides (grpo.max_num_steps=10; with --learn, polar learn's) and launch ones "
        "(topology.gateway_port=6100)",
    )
    lslurm.set_defaults(func=_launch_slurm, config=LAUNCH)
    ldirect = launch.add_parser(
        "direct", help="NeMo-RL's own launch of a recipe without Slurm: its Gym GRPO entry point, from its checkout"
    )
    ldirect.add_argument("--recipe", required=True, help="e.g. recipes/grpo-qwen3.5-4b-2n8g-megatron-polar-codex.yaml")
    ldirect.add_argument(
        "--rollout-url", default=None, help="our rollout server (default: http://$(hostname):<topology.rollout_port>)"
    )
    ldirect.add_argument("--run", action="store_true", help="run the command here (default: print it)")
    ldirect.add_argument("--json", action="store_true", help="one JSON object: command, cwd, argv (and exit_code)")
    ldirect.add_argument("--no-check", action="store_true", help="skip NeMo-RL's check of the recipe")
    ldirect.add_argument(
        "overrides",
        nargs="*",
        help="recipe overrides (cluster.num_nodes=1, grpo.max_num_steps=10) and launch ones (nemo_rl.dir=...)",
    )
    ldirect.set_defaults(func=_launch_direct, config=LAUNCH)
    lside = launch.add_parser("sidecar", help="one node's part under ray.sub (its SANDBOX_COMMAND)")
    lside.add_argument("overrides", nargs="*", help="launch overrides (topology.*), as `polar launch slurm` passes")
    lside.set_defaults(func=_launch_sidecar, config=LAUNCH)

    cluster = sub.add_parser("cluster", help="a Slurm cluster or a Docker engine on this machine").add_subparsers(
        dest="kind", required=True
    )
    cslurm = cluster.add_parser("slurm", help="munged, slurmctld and a slurmd per node as root, all under --root")
    cslurm.add_argument(
        "action",
        choices=("up", "down", "status"),
        help="up: start the daemons; down: stop them; status: its nodes, jobs",
    )
    cslurm.add_argument("--root", default="runs/slurm", help="its configuration, state, logs (default: runs/slurm)")
    cslurm.add_argument("--gpus", type=int, default=8, help="fake GPUs per node as GPU GRES (0: no GRES)")
    cslurm.add_argument(
        "--nodes",
        type=int,
        default=1,
        help="up: 1 (this machine's name, on loopback) or more (n1, n2, ...: each in its own network, UTS, PID "
        "and mount namespaces on a bridge inside this machine); down and status read what up recorded",
    )
    cslurm.add_argument("--mode", choices=("host", "chroot"), default="host", help="how the SPANK plugin runs tasks")
    cslurm.add_argument("--json", action="store_true", help="one JSON object")
    cslurm.set_defaults(func=_cluster_slurm)
    cdocker = cluster.add_parser(
        "docker", help="a Docker engine of our own (dockerd as root, its data, socket and logs under --root)"
    )
    cdocker.add_argument(
        "action", choices=("up", "down", "status"), help="up: start dockerd; down: stop it; status: images, containers"
    )
    cdocker.add_argument("--root", default="runs/docker", help="its data, socket, logs (default: runs/docker)")
    cdocker.add_argument(
        "--tag",
        action="append",
        default=[],
        type=_tag,
        metavar="NAME=LOCAL",
        help="up: NAME as another name of the local image LOCAL, for Dockerfiles that start FROM NAME (repeatable)",
    )
    cdocker.add_argument("--json", action="store_true", help="one JSON object")
    cdocker.set_defaults(func=_cluster_docker)
