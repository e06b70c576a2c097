"""`polar bench`: the benchmarks, each printing its result as JSON (indented unless `--json`); those with a
bar to hold exit 1 when it was not held."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path


def _print(result: dict, args: argparse.Namespace) -> None:
    print(json.dumps(result, indent=None if args.json else 2))


def _bench_proxy(args: argparse.Namespace) -> int:
    from ..bench.proxy import run

    result = run(
        latency_calls=args.latency_calls,
        rounds=args.rounds,
        window_s=args.window_s,
        tokens=args.tokens,
        token_delay_ms=args.token_delay_ms,
        concurrency=args.concurrency,
    )
    _print(result, args)
    return 0


def _bench_long(args: argparse.Namespace) -> int:
    from ..bench.long import MODES, run
    from ..paths import DEPS

    tokenizer = args.tokenizer or str(DEPS / "models" / "tiny")
    modes = MODES if Path(tokenizer, "tokenizer.json").is_file() or args.tokenizer else ("fake",)
    result = run(
        turns=args.turns, sessions=args.sessions, window=args.window, modes=modes, tokenizer=tokenizer, keep=args.keep
    )
    _print(result, args)
    return 0


def _bench_memory(args: argparse.Namespace) -> int:
    from ..bench.memory import SHAPES, run, servers

    shapes = args.shapes or SHAPES
    result = run(
        calls=args.calls,
        cache_mb=args.cache_mb,
        prompt_kb=args.prompt_kb,
        turns=args.turns,
        turn_kb=args.turn_kb,
        seed=args.seed,
        shapes=shapes,
    )
    if args.sessions:
        result["servers"] = servers(sessions=args.sessions)
        result["held"] = result["held"] and result["servers"]["held"]
    _print(result, args)
    return 0 if result["held"] else 1


def _bench_fuzz(args: argparse.Namespace) -> int:
    from ..bench.fuzz import run

    result = run(per_route=args.per_route, seed=args.seed, concurrency=args.concurrency, context_kb=args.context_kb)
    _print(result, args)
    held = not (result["unhandled_5xx"] or result["not_dialect_shaped"] or result["lost_records"])
    return 0 if held and not result["wrong_session"] and result["writer_alive"] else 1


def _bench_load(args: argparse.Namespace) -> int:
    from ..bench.load import run

    result = run(sessions=args.sessions, seconds=args.seconds)
    _print(result, args)
    return 0 if result["lost"] == 0 else 1


def _bench_merge(args: argparse.Namespace) -> int:
    from ..bench.merge import run

    shape = {"turns": args.turns, "compact_every": args.compact_every}
    _print(run(stores=args.store, sessions=args.sessions, seed=args.seed, **shape), args)
    return 0


def _bench_train(args: argparse.Namespace) -> int:
    from ..bench.train import run, table

    result = run(sessions=args.sessions, turns=tuple(args.turns), seed=args.seed)
    print(json.dumps(result) if args.json else table(result))
    return 0


def _bench_pipeline(args: argparse.Namespace) -> int:
    from ..bench.pipeline import run

    _print(run(sessions=args.sessions, seed=args.seed), args)
    return 0


def _bench_scale(args: argparse.Namespace) -> int:
    from ..bench.scale import run

    result = run(sessions=args.sessions, nodes=args.nodes, group=args.group, duration_s=args.duration)
    _print(result, args)
    return 0 if result["lost"] == 0 and result["dispatched_twice"] == 0 else 1


def _bench_grading(args: argparse.Namespace) -> int:
    from ..bench.grading import run

    result = run(commits=args.commits, repeats=args.repeats, tasks=args.tasks)
    _print(result, args)
    cut = all(not h["future_after"] for h in result["history"])
    return 0 if cut and result["evaluation"]["rewards"]["defended"] == [1.0] else 1


def _bench_view(args: argparse.Namespace) -> int:
    from ..bench.view import run

    result = run(calls=args.calls, trace_tokens=args.trace_tokens, repeats=args.repeats, keep=args.keep)
    _print(result, args)
    return 0 if not result["console_errors"] else 1


def _turns(text: str) -> list[int]:
    """comma-separated whole numbers"""
    try:
        return [int(t) for t in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of whole numbers") from None


def _shapes(text: str) -> tuple[str, ...]:
    """comma-separated shapes"""
    from ..bench.memory import SHAPES

    shapes = tuple(text.split(","))
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown shape {', '.join(unknown)} (choose from {', '.join(SHAPES)})")
    return shapes


def _bench_async(args: argparse.Namespace) -> int:
    from ..bench.learn_async import run

    result = run(
        steps=args.steps,
        prompts=args.prompts,
        samples=args.samples,
        tail=args.tail,
        tool_s=args.tool_s,
        max_age=args.max_age,
        lr=args.lr,
        overrides=args.set,
    )
    _print(result, args)
    return 0


def _add(
    bench: argparse._SubParsersAction, name: str, help: str, func: Callable[[argparse.Namespace], int]
) -> argparse.ArgumentParser:
    """One benchmark's parser, with the `--json` every benchmark takes."""
    parser = bench.add_parser(name, help=help)
    parser.add_argument("--json", action="store_true", help="one JSON object on one line")
    parser.set_defaults(func=func)
    return parser


def register(sub: argparse._SubParsersAction) -> None:
    bench = sub.add_parser("bench", help="benchmarks").add_subparsers(dest="action", required=True)
    bproxy = _add(bench, "proxy", "the proxy against direct calls and a bare relay, fake upstream", _bench_proxy)
    bproxy.add_argument("--latency-calls", type=int, default=800, help="calls per arm, one at a time")
    bproxy.add_argument("--rounds", type=int, default=8, help="turns each arm takes, throughput scenarios")
    bproxy.add_argument("--window-s", type=float, default=0.5, help="seconds measured per arm and round")
    bproxy.add_argument("--concurrency", type=int, default=256, help="calls in flight, throughput scenario")
    bproxy.add_argument("--tokens", type=int, default=16, help="tokens the fake upstream streams per answer")
    bproxy.add_argument(
        "--token-delay-ms", type=float, default=0.0, help="the fake upstream's pause before each token (0: none)"
    )
    blong = _add(bench, "long", "one agent session at 50-200 turns: store bytes, latency, trace build", _bench_long)
    blong.add_argument(
        "--turns", default="50,100,200", type=_turns, help="session lengths measured (one session, comma-separated)"
    )
    blong.add_argument("--sessions", type=int, default=3, help="identical sessions side by side")
    blong.add_argument("--window", type=int, default=20, help="turns at each end whose latency is compared")
    blong.add_argument("--tokenizer", default=None, help="tokenizer folder for real ids (default: the tiny model's)")
    blong.add_argument("--keep", default=None, help="copy each mode's record store into this folder")
    bmem = _add(
        bench, "memory", "the proxy's RSS over many calls of each shape: new, open, growing, edited", _bench_memory
    )
    bmem.add_argument("--calls", type=int, default=700, help="calls per shape, one after another")
    bmem.add_argument("--cache-mb", type=int, default=256, help="the session cache's bound (new_open)")
    bmem.add_argument("--prompt-kb", type=int, default=1024, help="each new prompt's size")
    bmem.add_argument("--turns", type=int, default=100, help="calls per growing or edited session")
    bmem.add_argument("--turn-kb", type=int, default=4, help="what each turn adds to a history")
    bmem.add_argument("--shapes", default=None, type=_shapes, help="default: all")
    bmem.add_argument("--seed", type=int, default=0, help="seeds the generated prompts: the same seed, the same calls")
    bmem.add_argument(
        "--sessions", type=int, default=800, help="sessions through a rollout server and a gateway node (0: none)"
    )
    bfuzz = _add(bench, "fuzz", "seeded mutated requests on every model route and the task route", _bench_fuzz)
    bfuzz.add_argument("--per-route", type=int, default=10_000, help="requests per route (5 model routes + tasks)")
    bfuzz.add_argument("--seed", type=int, default=0, help="seeds the mutations: the same seed, the same requests")
    bfuzz.add_argument("--concurrency", type=int, default=16, help="requests in flight at once")
    bfuzz.add_argument("--context-kb", type=int, default=0, help="context of its own in each model request")
    bload = _add(bench, "load", "many harness sessions streaming at once through one proxy", _bench_load)
    bload.add_argument("--sessions", type=int, default=512, help="sessions streaming at once, one call in flight each")
    bload.add_argument("--seconds", type=float, default=120.0, help="how long they keep calling")
    bmerge = _add(bench, "merge", "per_request vs linear chains vs prefix_tree over a session corpus", _bench_merge)
    bmerge.add_argument("--store", action="append", default=[], help="a record store to add (repeatable)")
    bmerge.add_argument("--sessions", type=int, default=12, help="generated long sessions")
    bmerge.add_argument("--seed", type=int, default=0, help="seeds the generated sessions")
    bmerge.add_argument("--turns", type=int, help="each generated session this long (no sub-agents); default: 30-100")
    bmerge.add_argument("--compact-every", type=int, help="with --turns: a compaction every this many calls")
    btrain = _add(
        bench, "train", "one GRPO step on the tiny model over per-request against prefix-merged traces", _bench_train
    )
    btrain.add_argument("--sessions", type=int, default=2, help="generated sessions per shape (at least 2)")
    btrain.add_argument(
        "--turns", type=_turns, default=[5, 8, 12], help="calls per session, a shape each (the first: the paper's)"
    )
    btrain.add_argument("--seed", type=int, default=0, help="seeds the generated sessions")
    basync = _add(bench, "async", "polar learn, sync against async, on a long-tailed workload", _bench_async)
    basync.add_argument("--steps", type=int, default=20, help="GRPO steps of each arm")
    basync.add_argument("--prompts", type=int, default=4, help="groups per step")
    basync.add_argument("--samples", type=int, default=8, help="sessions per group")
    basync.add_argument("--tail", type=float, default=8.0, help="the longest sessions' calls (the tail's cap)")
    basync.add_argument("--tool-s", type=float, default=2.0, help="seconds of tool between two calls")
    basync.add_argument("--max-age", type=int, default=1, help="the async arm's age bound, in updates")
    basync.add_argument("--lr", type=float, default=0.006, help="both arms' learning rate")
    basync.add_argument("--set", action="append", default=[], help="a `polar learn` override for both arms")
    bpipe = _add(
        bench, "pipeline", "naive slots vs staged pools with a READY buffer, simulated sessions", _bench_pipeline
    )
    bpipe.add_argument("--sessions", type=int, default=512, help="a GRPO step: 64 prompts x 8 samples")
    bpipe.add_argument("--seed", type=int, default=0, help="seeds the simulated sessions (set-up, calls, grading)")
    bscale = _add(bench, "scale", "the rollout server with thousands of sessions over simulated nodes", _bench_scale)
    bscale.add_argument("--sessions", type=int, default=2000, help="sessions submitted, as tasks of --group samples")
    bscale.add_argument("--nodes", type=int, default=16, help="simulated gateway nodes, an HTTP server each")
    bscale.add_argument("--group", type=int, default=8, help="samples per task (a GRPO group)")
    bscale.add_argument("--duration", type=float, default=40.0, help="seconds each simulated session runs")
    bgrade = _add(
        bench,
        "grading",
        "the grader's defences against none: the history cut, the test surface, the guard",
        _bench_grading,
    )
    bgrade.add_argument("--commits", type=int, default=10_000, help="the largest repository's commits (and 1/4, 1/2)")
    bgrade.add_argument("--repeats", type=int, default=3, help="runs of each measure (the median)")
    bgrade.add_argument("--tasks", type=int, default=3, help="bundled tasks graded with their reference fix")
    bview = _add(bench, "view", "polar view in headless chromium: a big run's list and a long trace", _bench_view)
    bview.add_argument("--calls", type=int, default=10_000, help="calls in the run's record store")
    bview.add_argument("--trace-tokens", type=int, default=100_000, help="tokens of the long session's trace")
    bview.add_argument("--repeats", type=int, default=3, help="fresh page loads per measure (the median)")
    bview.add_argument("--keep", default=None, help="write the run folder here and keep it (polar view it)")
