"""The `polar` command, built from its command groups: each module adds its own subcommands and holds
their handlers, thin shells over the modules that do the work, imported only when their command runs
(`polar proxy` never loads the rollout server)."""

from __future__ import annotations

import argparse
import signal
import sys

from .. import logs
from ..errors import ConfigError, ControlError
from . import bench, cluster, datasets, docs, local, proxy, records, runtime, system, view
from .parsing import Parser

GROUPS = (system, view, proxy, cluster, local, records, datasets, runtime, bench, docs)  # in `polar --help`'s order


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="polar", description="Token-faithful rollouts of agent harnesses for GRPO.")
    sub = p.add_subparsers(dest="command", required=True)
    for group in GROUPS:
        group.register(sub)
    p.set_defaults(root=p)  # the whole tree, for `polar docs` (which cannot import this module back)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logs.install()  # no caller writes megabytes into a log line
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # finally-blocks run: stores flush, groups stop
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"polar: {exc}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ControlError) as exc:  # a missing file, a server that did not answer
        print(f"polar: {exc}", file=sys.stderr)
        return 1
