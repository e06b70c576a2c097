"""The rollout system: all of it on one machine (`up`, `learn`), its two servers one at a time
(`serve-rollout`, `serve-gateway`), and what a running one holds (`status`)."""

from __future__ import annotations

import argparse
import json
import os

from .parsing import ConfigFile


def _up(args: argparse.Namespace) -> int:
    from .up import up

    summary = up(args.config.load(args.overrides))
    return 0 if summary["by_status"].get("completed", 0) == summary["sessions"] else 1


def _learn(args: argparse.Namespace) -> int:
    config = args.config.load(args.overrides)  # before the loop's import (torch): a typo fails at once
    from ..learn import learn

    summary = learn(config)
    keys = (
        "steps",
        "reward_first",
        "reward_last",
        "max_logprob_err",
        "seconds",
        "update_s",
        "mode",
        "busy",
        "ages",
        "stale",
        "spanning",
        "rollouts",
        "serving",
        "post_processing",
        "loss",
        "chains",
        "chains_built",
        "chains_trained",
        "trained_tokens",
        "sampled_tokens",
    )
    if args.json:
        print(json.dumps({k: summary[k] for k in keys} | {"run_dir": summary["run_dir"]}))
    else:
        print(", ".join(f"{k} {summary[k]}" for k in keys) + f"\nrun folder: {summary['run_dir']}")
    return 0


def _serve_rollout(args: argparse.Namespace) -> int:
    from ..server.rollout import serve

    serve(args.config.load(args.overrides))
    return 0


def _serve_gateway(args: argparse.Namespace) -> int:
    from ..server.gateway.node import serve

    serve(args.config.load(args.overrides))
    return 0


def _status(args: argparse.Namespace) -> int:
    from ..cluster.topology import TOKEN_ENV
    from .status import fetch, render

    status = fetch(args.url, args.task, os.environ.get(TOKEN_ENV))
    if args.json:
        print(json.dumps(status))
    else:
        render(status)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser("up", help="the whole system on a dataset: vLLM, a rollout server, a gateway node")
    run.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. num_samples=4 vllm.start=false")
    run.set_defaults(func=_up, config=ConfigFile("up", "nemo_polar.cli.up:UpConfig"))

    learn = sub.add_parser("learn", help="GRPO steps on the tiny model through the whole system: the rollouts train")
    learn.add_argument("--json", action="store_true", help="the summary as one JSON object")
    learn.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. steps=10 samples=4")
    learn.set_defaults(func=_learn, config=ConfigFile("learn", "nemo_polar.learn.config:LearnConfig"))

    rollout = sub.add_parser("serve-rollout", help="the rollout server alone (tasks, sessions, results, nodes)")
    rollout.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. port=8900 store.path=FILE")
    rollout.set_defaults(func=_serve_rollout, config=ConfigFile("rollout", "nemo_polar.server.rollout:RolloutConfig"))

    gateway = sub.add_parser("serve-gateway", help="one gateway node (proxy + staged pools) for a rollout server")
    gateway.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. node.rollout_url=http://head:8900")
    gateway.set_defaults(
        func=_serve_gateway, config=ConfigFile("gateway", "nemo_polar.server.gateway.node:GatewayConfig")
    )

    status = sub.add_parser(
        "status", help="tasks and gateway nodes of a running rollout server (its token: $POLAR_CONTROL_TOKEN)"
    )
    status.add_argument("--url", default="http://127.0.0.1:8900", help="the rollout server's URL")
    status.add_argument("--task", default=None, help="this task's sessions, each with its rollup")
    status.add_argument("--json", action="store_true", help="one JSON object, as the server answers it, not tables")
    status.set_defaults(func=_status)
