"""The tiny model (`model build`) and a local vLLM serving it (`vllm start`, `vllm stop`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _model_build(args: argparse.Namespace) -> int:
    from ..local.tiny_model import build

    out = build(Path(args.out), seed=args.seed)
    print(json.dumps(json.loads((out / "polar_tiny.json").read_text()) | {"path": str(out)}))
    return 0


def _vllm_start(args: argparse.Namespace) -> int:
    from ..local.vllm_server import VLLMServer

    server = VLLMServer(model=Path(args.model), port=args.port, log_path=Path(args.log) if args.log else None)
    server.start(timeout_s=args.timeout)
    Path(args.pidfile).parent.mkdir(parents=True, exist_ok=True)
    Path(args.pidfile).write_text(str(server.process.pid))  # type: ignore[union-attr]
    print(json.dumps({"url": server.url, "pid": server.process.pid, "model": args.model}))  # type: ignore[union-attr]
    return 0


def _vllm_stop(args: argparse.Namespace) -> int:
    from ..sandbox import stop_group

    pidfile = Path(args.pidfile)
    if not pidfile.exists():
        print(f"no {pidfile}: nothing to stop", file=sys.stderr)
        return 1
    stop_group(int(pidfile.read_text()))
    pidfile.unlink()
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    model = sub.add_parser("model", help="the tiny local model").add_subparsers(dest="action", required=True)
    build = model.add_parser("build", help="build the tiny model from a fixed seed")
    build.add_argument("--out", default=".deps/models/tiny", help="the folder to write the model and tokenizer to")
    build.add_argument("--seed", type=int, default=0, help="seeds the random weights: the same seed, the same model")
    build.set_defaults(func=_model_build)

    vllm = sub.add_parser("vllm", help="a local vLLM server").add_subparsers(dest="action", required=True)
    start = vllm.add_parser("start", help="start vLLM in its own process group and wait until healthy")
    start.add_argument("--model", default=".deps/models/tiny", help="the model folder (or Hugging Face name) to serve")
    start.add_argument("--port", type=int, default=8801, help="the port vLLM listens on, on 127.0.0.1")
    start.add_argument("--log", default="runs/vllm.log", help="the file vLLM's output goes to")
    start.add_argument("--timeout", type=float, default=300, help="seconds to wait for it to answer /health")
    start.add_argument("--pidfile", default="runs/vllm.pid", help="where its process group's id is written")
    start.set_defaults(func=_vllm_start)
    stop = vllm.add_parser("stop", help="stop the vLLM started by `polar vllm start` (by process group)")
    stop.add_argument("--pidfile", default="runs/vllm.pid", help="the file `polar vllm start` wrote")
    stop.set_defaults(func=_vllm_stop)
