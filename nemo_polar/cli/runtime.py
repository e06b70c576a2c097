"""`polar runtime check`: every harness calls the model from inside a runtime (the check: runtime_check.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import ConfigError


def _runtime_check(args: argparse.Namespace) -> int:
    from .runtime_check import main

    return main(
        args.runtime,
        args.image,
        args.upstream,
        args.only or None,
        args.json,
        args.engine,
        args.model,
        dict(args.version),
        args.fidelity,
        args.markdown,
    )


def harness_version(text: str) -> tuple[str, str]:
    """HARNESS=VERSION: that harness's CLI at another version than its pin"""
    name, sep, version = text.partition("=")
    if not sep or not version:
        raise argparse.ArgumentTypeError(f"{text!r} is not HARNESS=VERSION (e.g. codex=0.170.0)")
    return name, version


def runtime_kind(name: str) -> str:
    """a runtime kind (`nemo_polar.runtimes.RUNTIMES`) or 'package.module:Class'"""
    from ..runtimes import RUNTIMES

    try:
        return RUNTIMES.check(name)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def configuration(name: str) -> str:
    """a harness configuration: a harness, or harness-dialect for one that speaks several"""
    from .runtime_check import chosen

    try:
        return chosen([name])[0]
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(sub: argparse._SubParsersAction) -> None:
    runtime = sub.add_parser("runtime", help="sandboxes").add_subparsers(dest="action", required=True)
    rcheck = runtime.add_parser("check", help="every harness configuration calls the model from inside a runtime")
    rcheck.add_argument("--runtime", default="image", type=runtime_kind, help="local, docker, apptainer or image")
    rcheck.add_argument("--image", default=None, help="its image (image: a root filesystem; .deps/rootfs/bookworm)")
    rcheck.add_argument("--upstream", default=None, help="a running server's URL (default: start one)")
    rcheck.add_argument(
        "--engine", default="vllm", choices=["vllm", "sglang", "nemo_rl"], help="its kind (nemo_rl: NeMo-RL's server)"
    )
    rcheck.add_argument("--model", default=None, help="the name it serves (needed for nemo_rl with --upstream)")
    rcheck.add_argument(
        "--only",
        action="append",
        default=[],
        type=configuration,
        help="one configuration (repeatable), e.g. pi-gemini",
    )
    rcheck.add_argument(
        "--version",
        action="append",
        default=[],
        type=harness_version,
        metavar="HARNESS=VERSION",
        help="run that harness's CLI at this version, not its pin (repeatable; installed by "
        "POLAR_HARNESS_VERSIONS=HARNESS=VERSION scripts/setup.sh PART)",
    )
    rcheck.add_argument(
        "--fidelity",
        action="store_true",
        help="also a tool loop on the fake upstream, and a row per configuration: dialect, streaming, side calls, "
        "chains, calls recorded / made, tokens trained / sampled, the proxy's time per call",
    )
    rcheck.add_argument(
        "--markdown",
        type=Path,
        default=None,
        metavar="FILE",
        help="write the fidelity table between FILE's <!-- fidelity --> markers (implies --fidelity)",
    )
    rcheck.add_argument("--json", action="store_true", help="one JSON object on one line")
    rcheck.set_defaults(func=_runtime_check)
