"""`polar view`: a web page over a run folder, a store file or a running rollout server."""

from __future__ import annotations

import argparse
import os

from ..errors import ConfigError


def _view(args: argparse.Namespace) -> int:
    from ..view import tokens
    from ..view.app import serve
    from ..view.sources import open_source

    given = [x for x in (args.run_dir, args.store, args.rollout) if x]
    if len(given) != 1:
        raise ConfigError("polar view: give one of RUN_DIR, --store FILE or --rollout URL")
    if args.tokenizer:
        tokens.find(args.tokenizer, [])  # a wrong folder fails now, not on the first trace
    if args.rollout:
        from ..view.remote import RolloutSource

        token = args.token or os.environ.get("POLAR_CONTROL_TOKEN")
        source = RolloutSource(args.rollout, node_token=token, control_token=token)
    else:
        source = open_source(run_dir=args.run_dir, store=args.store)
    serve(source, args.host, args.port, args.tokenizer)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    view = sub.add_parser("view", help="a web page of tasks, sessions, calls, chain trees and traces")
    view.add_argument("run_dir", nargs="?", help="a run folder (runs/up/<time>, runs/learn/<time>)")
    view.add_argument("--store", help="a store file: a rollout store, or a record store alone")
    view.add_argument("--rollout", help="a running rollout server's URL: followed live")
    view.add_argument("--token", help="--rollout: the nodes' control token (default: $POLAR_CONTROL_TOKEN)")
    view.add_argument("--tokenizer", help="a model folder with tokenizer.json, to show text (default: found)")
    view.add_argument("--host", default="127.0.0.1", help="where to listen (it shows everything the run recorded)")
    view.add_argument("--port", type=int, default=8787, help="the port to listen on")
    view.set_defaults(func=_view)
