"""The `polar` command. Each subcommand is a thin shell over one module."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path

from . import logs
from .errors import ConfigError


def _proxy(args: argparse.Namespace) -> int:
    from .config import ProxyConfig, load
    from .control import LOOPBACK
    from .errors import ConfigError
    from .proxy.serve import serve

    config = load(ProxyConfig, "proxy", args.overrides)
    if config.control_token is None and config.host not in LOOPBACK:  # a node's proxy is guarded by the node
        raise ConfigError(f"host={config.host}: a proxy listening beyond loopback needs control_token (admin routes)")
    serve(config)
    return 0


def _up(args: argparse.Namespace) -> int:
    from .config import load
    from .server.up import UpConfig, up

    summary = up(load(UpConfig, "up", args.overrides))
    return 0 if summary["by_status"].get("completed", 0) == summary["sessions"] else 1


def _learn(args: argparse.Namespace) -> int:
    from .config import load
    from .learn import LearnConfig, learn

    summary = learn(load(LearnConfig, "learn", args.overrides))
    keys = ("steps", "reward_first", "reward_last", "max_logprob_err", "seconds")
    if args.json:
        print(json.dumps({k: summary[k] for k in keys} | {"run_dir": summary["run_dir"]}))
    else:
        print(", ".join(f"{k} {summary[k]}" for k in keys) + f"\nrun folder: {summary['run_dir']}")
    return 0


def _serve_rollout(args: argparse.Namespace) -> int:
    from .config import load
    from .server.rollout import RolloutConfig, serve

    serve(load(RolloutConfig, "rollout", args.overrides))
    return 0


def _serve_gateway(args: argparse.Namespace) -> int:
    from .config import load
    from .server.gateway.node import GatewayConfig, serve

    serve(load(GatewayConfig, "gateway", args.overrides))
    return 0


def _status(args: argparse.Namespace) -> int:
    from .server.status import fetch, render

    status = fetch(args.url, args.task)
    if args.json:
        print(json.dumps(status))
    else:
        render(status)
    return 0


def _model_build(args: argparse.Namespace) -> int:
    from .local.tiny_model import build

    out = build(Path(args.out), seed=args.seed)
    print(json.dumps(json.loads((out / "polar_tiny.json").read_text()) | {"path": str(out)}))
    return 0


def _vllm_start(args: argparse.Namespace) -> int:
    from .local.vllm_server import VLLMServer

    server = VLLMServer(model=Path(args.model), port=args.port, log_path=Path(args.log) if args.log else None)
    server.start(timeout_s=args.timeout)
    Path(args.pidfile).parent.mkdir(parents=True, exist_ok=True)
    Path(args.pidfile).write_text(str(server.process.pid))  # type: ignore[union-attr]
    print(json.dumps({"url": server.url, "pid": server.process.pid, "model": args.model}))  # type: ignore[union-attr]
    return 0


def _vllm_stop(args: argparse.Namespace) -> int:
    from .local.vllm_server import stop_group

    pidfile = Path(args.pidfile)
    if not pidfile.exists():
        print(f"no {pidfile}: nothing to stop", file=sys.stderr)
        return 1
    stop_group(int(pidfile.read_text()))
    pidfile.unlink()
    return 0


def _export(args: argparse.Namespace) -> int:
    from .store import SqliteStore

    store = SqliteStore(args.store, read_only=True)
    out = open(args.out, "w") if args.out else sys.stdout
    for record in store.records(args.session):
        out.write(record.model_dump_json() + "\n")
    store.close()
    return 0


def _bench_proxy(args: argparse.Namespace) -> int:
    from .bench.proxy import run

    result = run(
        latency_calls=args.latency_calls,
        rounds=args.rounds,
        window_s=args.window_s,
        tokens=args.tokens,
        token_delay_ms=args.token_delay_ms,
        concurrency=args.concurrency,
    )
    print(json.dumps(result, indent=None if args.json else 2))
    return 0


def _bench_long(args: argparse.Namespace) -> int:
    from .bench.long import MODES, run
    from .local.vllm_server import DEPS

    tokenizer = args.tokenizer or str(DEPS / "models" / "tiny")
    modes = MODES if Path(tokenizer, "tokenizer.json").is_file() or args.tokenizer else ("fake",)
    turns = [int(t) for t in args.turns.split(",")]
    result = run(
        turns=turns, sessions=args.sessions, window=args.window, modes=modes, tokenizer=tokenizer, keep=args.keep
    )
    print(json.dumps(result, indent=None if args.json else 2))
    return 0


def _bench_fuzz(args: argparse.Namespace) -> int:
    from .bench.fuzz import run

    result = run(per_route=args.per_route, seed=args.seed, concurrency=args.concurrency)
    print(json.dumps(result, indent=None if args.json else 2))
    held = not (result["unhandled_5xx"] or result["not_dialect_shaped"] or result["lost_records"])
    return 0 if held and not result["wrong_session"] and result["writer_alive"] else 1


def _bench_load(args: argparse.Namespace) -> int:
    from .bench.load import run

    result = run(sessions=args.sessions, seconds=args.seconds)
    print(json.dumps(result, indent=None if args.json else 2))
    return 0 if result["lost"] == 0 else 1


def _bench_merge(args: argparse.Namespace) -> int:
    from .bench.merge import run

    result = run(stores=args.store, sessions=args.sessions, seed=args.seed)
    print(json.dumps(result, indent=None if args.json else 2))
    return 0


def _bench_pipeline(args: argparse.Namespace) -> int:
    from .bench.pipeline import run

    result = run(sessions=args.sessions, seed=args.seed)
    print(json.dumps(result, indent=None if args.json else 2))
    return 0


def _bench_scale(args: argparse.Namespace) -> int:
    from .bench.scale import run

    result = run(sessions=args.sessions, nodes=args.nodes, group=args.group, duration_s=args.duration)
    print(json.dumps(result, indent=None if args.json else 2))
    return 0 if result["lost"] == 0 and result["dispatched_twice"] == 0 else 1


def _view(args: argparse.Namespace) -> int:
    from .view import tokens
    from .view.app import serve
    from .view.sources import open_source

    given = [x for x in (args.run_dir, args.store, args.rollout) if x]
    if len(given) != 1:
        raise ConfigError("polar view: give one of RUN_DIR, --store FILE or --rollout URL")
    if args.tokenizer:
        tokens.find(args.tokenizer, [])  # a wrong folder fails now, not on the first trace
    if args.rollout:
        from .view.remote import RolloutSource

        token = args.token or os.environ.get("POLAR_CONTROL_TOKEN")
        source = RolloutSource(args.rollout, node_token=token, control_token=token)
    else:
        source = open_source(run_dir=args.run_dir, store=args.store)
    serve(source, args.host, args.port, args.tokenizer)
    return 0


def _bench_view(args: argparse.Namespace) -> int:
    from .bench.view import run

    result = run(calls=args.calls, trace_tokens=args.trace_tokens, repeats=args.repeats, keep=args.keep)
    print(json.dumps(result, indent=None if args.json else 2))
    return 0 if not result["console_errors"] else 1


def _traces(args: argparse.Namespace) -> int:
    from .store import SqliteStore
    from .traces import build
    from .traces.export import write_jsonl

    store = SqliteStore(args.store, read_only=True)
    sessions = [args.session] if args.session else sorted({s.id for s in store.sessions()})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = None
    if args.tokenizer:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    summary = []
    for sid in sessions:
        result = build(store.records(sid), args.builder, tokenizer=tokenizer, max_tokens=args.max_tokens)
        write_jsonl(result, out / f"{sid}.jsonl", session_id=sid)
        summary.append({"session_id": sid} | result.stats.model_dump())
    store.close()
    print(json.dumps(summary, indent=None if args.json else 2))
    return 0


def _tasks_check(args: argparse.Namespace) -> int:
    from .tasks.check import check_tasks

    report = check_tasks(workers=args.workers)
    if args.json:
        print(json.dumps(report))
    else:
        n, took = report["tasks"], report["elapsed_s"]
        print(f"{report['correct']}/{report['checks']} checks right over {n} tasks in {took}s")
        for f in report["failures"]:
            print(f"  {f['task']} {f['check']}: got {f['got']}, expected {f['expected']}: {f['detail']}")
    return 0 if not report["failures"] else 1


def _data_swe(args: argparse.Namespace) -> int:
    from .tasks.gym_rows import write

    n = write(args.input, args.out, namespace=args.namespace, engine=args.engine)
    print(json.dumps({"rows": n, "out": str(Path(args.out).resolve())}))
    return 0


def _runtime_check(args: argparse.Namespace) -> int:
    from .server.runtime_check import main

    return main(args.runtime, args.image, args.upstream, args.only or None, args.json)


def _tasks_build(args: argparse.Namespace) -> int:
    from .tasks.materialize import build

    print(build(args.out))
    return 0


def _recipes_check(args: argparse.Namespace) -> int:
    from .recipes.check import check

    report = check(args.recipe or None, args.overrides)
    if args.json:
        print(json.dumps(report))
    else:
        print(f"{report['count']} recipes, {len(report['errors'])} errors")
        for e in report["errors"]:
            print(f"  {e['recipe']}: {e['key']}: {e['message']}")
    return 0 if report["ok"] else 1


def _launch_slurm(args: argparse.Namespace) -> int:
    from .cluster.launch import main_slurm, render_text
    from .cluster.topology import LaunchConfig, split_overrides
    from .config import load

    recipe_overrides, launch_overrides = split_overrides(args.overrides)
    cfg = load(LaunchConfig, "launch", launch_overrides)
    plan = main_slurm(
        cfg,
        nodes=args.nodes,
        recipe=args.recipe,
        recipe_overrides=recipe_overrides,
        launch_overrides=launch_overrides,
        dry_run=args.dry_run,
        check=not args.no_check,
    )
    if args.dry_run:
        print(json.dumps(plan) if args.json else render_text(plan))
    return 0


def _launch_sidecar(args: argparse.Namespace) -> int:
    from .cluster.launch import sidecar
    from .cluster.topology import LaunchConfig
    from .config import load

    return sidecar(load(LaunchConfig, "launch", args.overrides))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="polar", description="Token-faithful rollouts of agent harnesses for GRPO.")
    sub = p.add_subparsers(dest="command", required=True)

    run = sub.add_parser("up", help="the whole system on a dataset: vLLM, a rollout server, a gateway node")
    run.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. num_samples=4 vllm.start=false")
    run.set_defaults(func=_up)

    learn = sub.add_parser("learn", help="GRPO steps on the tiny model through the whole system: the rollouts train")
    learn.add_argument("--json", action="store_true", help="the summary as one JSON object")
    learn.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. steps=10 samples=4")
    learn.set_defaults(func=_learn)

    rollout = sub.add_parser("serve-rollout", help="the rollout server alone (tasks, sessions, results, nodes)")
    rollout.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. port=8900 store.path=FILE")
    rollout.set_defaults(func=_serve_rollout)

    gateway = sub.add_parser("serve-gateway", help="one gateway node (proxy + staged pools) for a rollout server")
    gateway.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. node.rollout_url=http://head:8900")
    gateway.set_defaults(func=_serve_gateway)

    status = sub.add_parser("status", help="tasks and gateway nodes of a running rollout server")
    status.add_argument("--url", default="http://127.0.0.1:8900")
    status.add_argument("--task", default=None, help="this task's sessions, each with its rollup")
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=_status)

    view = sub.add_parser("view", help="a web page of tasks, sessions, calls, chain trees and traces")
    view.add_argument("run_dir", nargs="?", help="a run folder (runs/up/<time>, runs/learn/<time>)")
    view.add_argument("--store", help="a store file: a rollout store, or a record store alone")
    view.add_argument("--rollout", help="a running rollout server's URL: followed live")
    view.add_argument("--token", help="--rollout: the nodes' control token (default: $POLAR_CONTROL_TOKEN)")
    view.add_argument("--tokenizer", help="a model folder with tokenizer.json, to show text (default: found)")
    view.add_argument("--host", default="127.0.0.1", help="where to listen (it shows everything the run recorded)")
    view.add_argument("--port", type=int, default=8787)
    view.set_defaults(func=_view)

    proxy = sub.add_parser("proxy", help="run the token-faithful proxy alone (capture only)")
    proxy.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. upstream.url=http://h:8000 port=8800")
    proxy.set_defaults(func=_proxy)

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
    lslurm.add_argument("--nodes", type=int, required=True)
    lslurm.add_argument("--recipe", required=True, help="e.g. recipes/grpo-qwen3.5-4b-2n8g-megatron-polar-codex.yaml")
    lslurm.add_argument("--dry-run", action="store_true", help="print what each node would run; submit nothing")
    lslurm.add_argument("--json", action="store_true", help="with --dry-run: the plan as one JSON object")
    lslurm.add_argument("--no-check", action="store_true", help="skip NeMo-RL's check of the recipe")
    lslurm.add_argument(
        "overrides",
        nargs="*",
        help="recipe overrides (grpo.max_num_steps=10) and launch ones (topology.gateway_port=6100)",
    )
    lslurm.set_defaults(func=_launch_slurm)
    lside = launch.add_parser("sidecar", help="one node's part under ray.sub (its SANDBOX_COMMAND)")
    lside.add_argument("overrides", nargs="*", help="launch overrides (topology.*), as `polar launch slurm` passes")
    lside.set_defaults(func=_launch_sidecar)

    model = sub.add_parser("model", help="the tiny local model").add_subparsers(dest="action", required=True)
    build = model.add_parser("build", help="build the tiny model from a fixed seed")
    build.add_argument("--out", default=".deps/models/tiny")
    build.add_argument("--seed", type=int, default=0)
    build.set_defaults(func=_model_build)

    vllm = sub.add_parser("vllm", help="a local vLLM server").add_subparsers(dest="action", required=True)
    start = vllm.add_parser("start", help="start vLLM in its own process group and wait until healthy")
    start.add_argument("--model", default=".deps/models/tiny")
    start.add_argument("--port", type=int, default=8801)
    start.add_argument("--log", default="runs/vllm.log")
    start.add_argument("--timeout", type=float, default=300)
    start.add_argument("--pidfile", default="runs/vllm.pid")
    start.set_defaults(func=_vllm_start)
    stop = vllm.add_parser("stop", help="stop the vLLM started by `polar vllm start` (by process group)")
    stop.add_argument("--pidfile", default="runs/vllm.pid")
    stop.set_defaults(func=_vllm_stop)

    export = sub.add_parser("export", help="write records as JSONL, one CompletionRecord per line")
    export.add_argument("--store", default="runs/proxy/records.sqlite")
    export.add_argument("--session", default=None)
    export.add_argument("--out", default=None)
    export.set_defaults(func=_export)

    traces = sub.add_parser("traces", help="build training traces from recorded sessions, one JSONL per session")
    traces.add_argument("--store", default="runs/proxy/records.sqlite")
    traces.add_argument("--session", default=None, help="one session (default: every session in the store)")
    traces.add_argument("--builder", default="prefix_tree", choices=["prefix_tree", "per_request"])
    traces.add_argument("--tokenizer", default=None, help="a tokenizer folder, to name drift causes")
    traces.add_argument("--max-tokens", type=int, default=None, help="length policy: keep the causal prefix")
    traces.add_argument("--out", default="runs/traces")
    traces.add_argument("--json", action="store_true")
    traces.set_defaults(func=_traces)

    data = sub.add_parser("data", help="datasets for training").add_subparsers(dest="action", required=True)
    dswe = data.add_parser("swe", help="SWE-bench / SWE-Gym rows (JSONL or parquet) -> the Gym rows a recipe names")
    dswe.add_argument("input", help="a .jsonl or .parquet file of SWE-bench / SWE-Gym rows")
    dswe.add_argument("--out", required=True, help="e.g. $POLAR_DATA_DIR/swe_gym/train.jsonl")
    dswe.add_argument("--namespace", default="swebench", help="the instance images' registry namespace")
    dswe.add_argument("--engine", default="apptainer", choices=["apptainer", "docker"], help="how images are named")
    dswe.set_defaults(func=_data_swe)

    tasks = sub.add_parser("tasks", help="the bundled CPU task set").add_subparsers(dest="action", required=True)
    tcheck = tasks.add_parser("check", help="grade every task's reference fix (1), no change (0), wrong fix (0)")
    tcheck.add_argument("--json", action="store_true", help="one JSON object on one line")
    tcheck.add_argument("--workers", type=int, default=None, help="tasks graded at once")
    tcheck.set_defaults(func=_tasks_check)
    tbuild = tasks.add_parser("build", help="write the task repos and OUT/tasks.jsonl (SWE-bench style rows)")
    tbuild.add_argument("--out", required=True)
    tbuild.set_defaults(func=_tasks_build)

    runtime = sub.add_parser("runtime", help="sandboxes").add_subparsers(dest="action", required=True)
    rcheck = runtime.add_parser("check", help="every harness configuration calls the model from inside a runtime")
    rcheck.add_argument("--runtime", default="image", help="local, docker, apptainer or image")
    rcheck.add_argument("--image", default=None, help="its image (image: a root filesystem; .deps/rootfs/bookworm)")
    rcheck.add_argument("--upstream", default=None, help="a running vLLM's URL (default: start one on the tiny model)")
    rcheck.add_argument("--only", action="append", default=[], help="one configuration (repeatable), e.g. pi-gemini")
    rcheck.add_argument("--json", action="store_true", help="one JSON object on one line")
    rcheck.set_defaults(func=_runtime_check)

    bench = sub.add_parser("bench", help="benchmarks").add_subparsers(dest="action", required=True)
    bproxy = bench.add_parser("proxy", help="the proxy against direct calls and a bare relay, fake upstream")
    bproxy.add_argument("--json", action="store_true", help="one JSON object on one line")
    bproxy.add_argument("--latency-calls", type=int, default=800, help="calls per arm, one at a time")
    bproxy.add_argument("--rounds", type=int, default=8, help="turns each arm takes, throughput scenarios")
    bproxy.add_argument("--window-s", type=float, default=0.5, help="seconds measured per arm and round")
    bproxy.add_argument("--concurrency", type=int, default=256, help="calls in flight, throughput scenario")
    bproxy.add_argument("--tokens", type=int, default=16)
    bproxy.add_argument("--token-delay-ms", type=float, default=0.0)
    bproxy.set_defaults(func=_bench_proxy)
    blong = bench.add_parser("long", help="one agent session at 50-200 turns: store bytes, latency, trace build")
    blong.add_argument("--json", action="store_true", help="one JSON object on one line")
    blong.add_argument("--turns", default="50,100,200", help="session lengths measured (one session, comma-separated)")
    blong.add_argument("--sessions", type=int, default=3, help="identical sessions side by side")
    blong.add_argument("--window", type=int, default=20, help="turns at each end whose latency is compared")
    blong.add_argument("--tokenizer", default=None, help="tokenizer folder for real ids (default: the tiny model's)")
    blong.add_argument("--keep", default=None, help="copy each mode's record store into this folder")
    blong.set_defaults(func=_bench_long)
    bfuzz = bench.add_parser("fuzz", help="seeded mutated requests on every model route and the task route")
    bfuzz.add_argument("--json", action="store_true", help="one JSON object on one line")
    bfuzz.add_argument("--per-route", type=int, default=10_000, help="requests per route (5 model routes + tasks)")
    bfuzz.add_argument("--seed", type=int, default=0)
    bfuzz.add_argument("--concurrency", type=int, default=16)
    bfuzz.set_defaults(func=_bench_fuzz)
    bload = bench.add_parser("load", help="many harness sessions streaming at once through one proxy")
    bload.add_argument("--json", action="store_true", help="one JSON object on one line")
    bload.add_argument("--sessions", type=int, default=512)
    bload.add_argument("--seconds", type=float, default=120.0)
    bload.set_defaults(func=_bench_load)
    bmerge = bench.add_parser("merge", help="per_request vs linear chains vs prefix_tree over a session corpus")
    bmerge.add_argument("--json", action="store_true", help="one JSON object on one line")
    bmerge.add_argument("--store", action="append", default=[], help="a record store to add (repeatable)")
    bmerge.add_argument("--sessions", type=int, default=12, help="generated long sessions")
    bmerge.add_argument("--seed", type=int, default=0)
    bmerge.set_defaults(func=_bench_merge)
    bpipe = bench.add_parser("pipeline", help="naive slots vs staged pools with a READY buffer, simulated sessions")
    bpipe.add_argument("--json", action="store_true", help="one JSON object on one line")
    bpipe.add_argument("--sessions", type=int, default=512, help="a GRPO step: 64 prompts x 8 samples")
    bpipe.add_argument("--seed", type=int, default=0)
    bpipe.set_defaults(func=_bench_pipeline)
    bscale = bench.add_parser("scale", help="the rollout server with thousands of sessions over simulated nodes")
    bscale.add_argument("--json", action="store_true", help="one JSON object on one line")
    bscale.add_argument("--sessions", type=int, default=2000)
    bscale.add_argument("--nodes", type=int, default=16)
    bscale.add_argument("--group", type=int, default=8, help="samples per task (a GRPO group)")
    bscale.add_argument("--duration", type=float, default=40.0, help="seconds each simulated session runs")
    bscale.set_defaults(func=_bench_scale)
    bview = bench.add_parser("view", help="polar view in headless chromium: a big run's list and a long trace")
    bview.add_argument("--json", action="store_true", help="one JSON object on one line")
    bview.add_argument("--calls", type=int, default=10_000, help="calls in the run's record store")
    bview.add_argument("--trace-tokens", type=int, default=100_000, help="tokens of the long session's trace")
    bview.add_argument("--repeats", type=int, default=3, help="fresh page loads per measure (the median)")
    bview.add_argument("--keep", default=None, help="write the run folder here and keep it (polar view it)")
    bview.set_defaults(func=_bench_view)
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
    except FileNotFoundError as exc:
        print(f"polar: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
