"""A record store's sessions out of it: their records as JSONL (`export`), or built into training traces
(`traces`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..traces import BUILDERS


def _export(args: argparse.Namespace) -> int:
    from ..store import SqliteStore

    store = SqliteStore(args.store, read_only=True)
    out = open(args.out, "w") if args.out else sys.stdout
    for record in store.records(args.session):
        out.write(record.model_dump_json() + "\n")
    store.close()
    return 0


def _traces(args: argparse.Namespace) -> int:
    from ..store import SqliteStore
    from ..traces import build
    from ..traces.export import write_jsonl

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
        result = build(
            store.records(sid), args.builder, tokenizer=tokenizer, max_tokens=args.max_tokens, repair=args.repair
        )
        write_jsonl(result, out / f"{sid}.jsonl", session_id=sid)
        summary.append({"session_id": sid} | result.stats.model_dump())
    store.close()
    print(json.dumps(summary, indent=None if args.json else 2))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    export = sub.add_parser("export", help="write records as JSONL, one CompletionRecord per line")
    export.add_argument("--store", default="runs/proxy/records.sqlite", help="the record store (SQLite) to read")
    export.add_argument("--session", default=None, help="one session's records (default: every session's)")
    export.add_argument("--out", default=None, help="the JSONL file to write (default: standard output)")
    export.set_defaults(func=_export)

    traces = sub.add_parser("traces", help="build training traces from recorded sessions, one JSONL per session")
    traces.add_argument("--store", default="runs/proxy/records.sqlite", help="the record store (SQLite) to read")
    traces.add_argument("--session", default=None, help="one session (default: every session in the store)")
    traces.add_argument("--builder", default="prefix_tree", choices=list(BUILDERS), help="how calls become traces")
    traces.add_argument(
        "--no-repair",
        dest="repair",
        action="store_false",
        help="fork a new chain at every drift instead of repairing template quirks: only on-policy contexts",
    )
    traces.add_argument("--tokenizer", default=None, help="a tokenizer folder, to name drift causes")
    traces.add_argument("--max-tokens", type=int, default=None, help="length policy: keep the causal prefix")
    traces.add_argument("--out", default="runs/traces", help="the folder of the traces, <session id>.jsonl each")
    traces.add_argument("--json", action="store_true", help="the build's stats on one line (default: indented)")
    traces.set_defaults(func=_traces)
