"""`polar bench merge`: per_request vs linear chains vs prefix_tree over a corpus of agent sessions.

The corpus (generated sessions with their ground truth, and recorded ones) is `merge_corpus.py`;
the figures and the report over them, `merge_report.py`.

The builders:
- prefix_tree: `nemo_polar.traces.build`, with the tokenizer for generated sessions.
- per_request: the same builder's function, one trace per trainable call.
- linear_chain: the reference's prefix merging (research/polar.md 3.4), the baseline only
  (`linear_chain.py`).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from ..env.gym import primary_chain
from ..errors import TraceBuildError
from ..traces import build, trie_size
from ..traces.builders import per_request, trainable
from ..traces.models import BuildStats, Trace
from .linear_chain import linear_chains
from .merge_corpus import Case, generate, qwen_tokenizer, recorded
from .merge_report import BUILDERS, Figures, Measured, report


def _figures(traces: list[Trace], sampled: int) -> Figures:
    trained = sum(t.trained_tokens for t in traces)
    sequences = [t.prompt_ids + t.response_ids for t in traces]
    return Figures(len(traces), sum(map(len, sequences)), trained, trie_size(sequences), sampled - trained)


def measure(case: Case) -> Measured:
    records = case.records
    kept = trainable(records, BuildStats())
    sampled = sum(len(r.completion_token_ids) for r in kept)
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    built = build(records, "prefix_tree", tokenizer=case.tokenizer)  # timed whole: build_tokens_per_s
    seconds["prefix_tree"] = time.perf_counter() - t0
    tree, primary = built.stats, primary_chain(built.traces)
    # per_request is the builder's own function: `build` would add a second, slower trie count
    t0 = time.perf_counter()
    per_call = per_request(kept, BuildStats())
    seconds["per_request"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    linear = linear_chains(records)
    seconds["linear_chain"] = time.perf_counter() - t0
    return Measured(
        case=case,
        figures={
            "per_request": _figures(per_call, sampled),
            "linear_chain": _figures(linear.traces, sampled),
            "prefix_tree": Figures(
                tree.traces, tree.trace_tokens, tree.trained_tokens, tree.unique_tokens, sampled - tree.trained_tokens
            ),
        },
        record_tokens=sum(len(r.prompt_token_ids) + len(r.completion_token_ids) for r in records),
        roots=tree.roots,
        drift=Counter(tree.drift),
        repaired=Counter(tree.repaired),
        linear=linear,
        seconds=seconds,
        sampled=sampled,
        primary_trained=built.traces[primary].trained_tokens if primary is not None else 0,
    )


def run(
    stores: list[str] | None = None,
    sessions: int = 12,
    seed: int = 0,
    turns: int | None = None,
    compact_every: int | None = None,
) -> dict[str, Any]:
    """`turns` (with `compact_every`): generated sessions of that length, compacting that often, no sub-agents."""
    t0 = time.perf_counter()
    cases = generate(sessions, seed, qwen_tokenizer(), turns, compact_every) if sessions > 0 else []
    generate_s = time.perf_counter() - t0
    cases += recorded(stores or [])
    measured, failed = [], []
    for case in cases:
        try:
            measured.append(measure(case))
        except TraceBuildError as exc:  # a broken recorded session is reported, not fatal
            failed.append({"session_id": case.session_id, "error": str(exc)})
    out = report(measured)
    out["recorded_failed"] = failed
    out["seconds"] = {
        "generate": round(generate_s, 2),
        **{b: round(sum(m.seconds[b] for m in measured), 2) for b in BUILDERS},
        "total": round(time.perf_counter() - t0, 2),
    }
    return out
