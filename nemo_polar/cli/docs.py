"""`polar docs`: the reference pages written from the code, so they cannot go stale: docs/cli.md from the
parser, docs/configuration.md from the settings models and `conf/`, and docs/traces.md's annotated trace from a
recorded session (trace_example.py; the rest of that page is written by hand) (`--check`: only say which differ).
`polar gym-examples`: the Gym servers' acceptance files, made by Gym's own CLI (env/examples.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..paths import ROOT

DOCS = ROOT / "docs"  # the repository's


def written(root: argparse.ArgumentParser) -> dict[str, str]:
    """Each page's file name and its text, as the code writes it now from the `polar` parser."""
    from . import cli_reference, config_reference, trace_example

    return {
        "cli.md": cli_reference.page(root),
        "configuration.md": config_reference.page(root),
        "traces.md": trace_example.page((DOCS / "traces.md").read_text()),
    }


def stale(folder: Path, pages: dict[str, str]) -> list[str]:
    """The pages in `folder` that differ from `pages`."""
    return [
        name for name, text in pages.items() if not (folder / name).is_file() or (folder / name).read_text() != text
    ]


def _docs(args: argparse.Namespace) -> int:
    folder, pages = Path(args.out) if args.out else DOCS, written(args.root)
    if args.check:
        differ = stale(folder, pages)
        for name in differ:
            print(f"{folder / name} is stale: run `polar docs`", file=sys.stderr)
        return 1 if differ else 0
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in pages.items():
        (folder / name).write_text(text)
        print(folder / name)
    return 0


def _gym_examples(args: argparse.Namespace) -> int:
    from ..env.examples import run
    from ..nemo_rl import GYM_VERSIONS

    version = args.gym_version or GYM_VERSIONS[-1]
    if version not in GYM_VERSIONS:
        print(f"polar gym-examples: --gym-version {version}: choose from {', '.join(GYM_VERSIONS)}", file=sys.stderr)
        return 2
    return run(version, args.readmes)


def register(sub: argparse._SubParsersAction) -> None:
    docs = sub.add_parser(
        "docs",
        help="write the reference pages: every command (cli.md), every key (configuration.md), and the annotated "
        "trace of traces.md",
    )
    docs.add_argument("--out", default=None, help="the folder to write them to (default: the repository's docs/)")
    docs.add_argument("--check", action="store_true", help="write nothing; exit 1 naming each page that is stale")
    docs.set_defaults(func=_docs)
    examples = sub.add_parser(
        "gym-examples",
        help="remake the Gym servers' acceptance files (data/example_metrics.json, example_rollouts.jsonl) with Gym's "
        "own CLI against the tiny model, and their READMEs' plug-in lists",
    )
    examples.add_argument("--gym-version", default=None, help="whose CLI makes them (default: the newest we run)")
    examples.add_argument("--readmes", action="store_true", help="only the READMEs' lists of plug-ins")
    examples.set_defaults(func=_gym_examples)
