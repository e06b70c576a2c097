"""One session as the page shows it, from its row (state, result, task) and its CompletionRecords:
its calls in order, its rollup, the builder's chain tree, and its traces (a summary, then one trace's
tokens on demand). Pure: no I/O, no server.

The traces are built again from the records with the session's builder and no tokenizer, as the
gateway node built them at POST-RUN: the same records give the same traces, and the drift events the
JSONL export does not keep.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import TraceBuildError
from ..harnesses import HARNESSES
from ..records import CompletionRecord
from ..rollup import rollup, view
from ..traces import BuildResult, build
from .tokens import Vocab
from .tree import chain_tree

# what a call's summary leaves out: token lists and bodies come with the call itself (`call_json`)
_HEAVY = ("native_request", "upstream_request", "prompt_token_ids", "completion_token_ids", "completion_logprobs")


@dataclass
class SessionView:
    row: dict[str, Any]  # the listing's row: ids, state, result, task fields
    records: list[CompletionRecord]
    built: BuildResult | None
    build_error: str | None = None

    @classmethod
    def of(cls, row: dict[str, Any], records: list[CompletionRecord]) -> SessionView:
        try:
            built = build(records, row.get("builder") or "prefix_tree")
        except TraceBuildError as exc:  # shown, not raised: the page is where one looks for why
            return cls(row, records, None, str(exc))
        harness = (row.get("harness") or "").split(" (")[0]  # "opencode (variant)"
        if harness in HARNESSES:  # its side calls named, as the gateway node named them
            HARNESSES[harness].name_side_calls(built.traces, {r.id: r.native_request for r in records})
        return cls(row, records, built)

    @property
    def final(self) -> bool:
        return bool(self.row.get("final"))

    def detail(self) -> dict[str, Any]:
        trained = self.built.stats.trained_tokens if self.built else 0
        timing = (self.row.get("result") or {}).get("timing")
        return {
            "session": self.row,
            "rollup": view(rollup(self.records, trained), timing),
            "calls": [call_summary(r, self.records[0].started_at if self.records else 0.0) for r in self.records],
            "tree": chain_tree(self.records, self.built) if self.built else None,
            "traces": [trace_summary(i, t) for i, t in enumerate(self.built.traces)] if self.built else [],
            "stats": self.built.stats.model_dump() if self.built else None,
            "build_error": self.build_error,
        }

    def call(self, record_id: str) -> dict[str, Any] | None:
        for r in self.records:
            if r.id == record_id:
                return call_json(r)
        return None

    def trace(self, index: int, vocab: Vocab | None) -> dict[str, Any] | None:
        if self.built is None or not 0 <= index < len(self.built.traces):
            return None
        return trace_tokens(self.built, index, {r.id: r for r in self.records}, vocab)


def call_summary(r: CompletionRecord, t0: float) -> dict[str, Any]:
    return {
        "id": r.id,
        "seq": r.seq,
        "dialect": r.dialect,
        "stream": r.stream,
        "status": r.status,
        "start_s": round(r.started_at - t0, 3),
        "latency_s": round(r.finished_at - r.started_at, 3),
        "ttft_s": round(r.first_token_at - r.started_at, 3) if r.first_token_at else None,
        "prompt_tokens": len(r.prompt_token_ids) or r.usage.get("prompt_tokens", 0),
        "completion_tokens": len(r.completion_token_ids) or r.usage.get("completion_tokens", 0),
        "finish_reason": r.finish_reason,
        "model": r.upstream.model,
        "policy_version": r.upstream.policy_version,
        "error": r.error,
    }


def call_json(r: CompletionRecord) -> dict[str, Any]:
    """The call as the harness sent it and as it was answered (token lists as counts)."""
    body = r.model_dump(mode="json", exclude=set(_HEAVY) - {"native_request"})
    return body | {
        "prompt_tokens": len(r.prompt_token_ids),
        "completion_tokens": len(r.completion_token_ids),
        "upstream_request_keys": sorted(r.upstream_request or {}),
    }


def trace_summary(index: int, t: Any) -> dict[str, Any]:
    meta = {k: v for k, v in t.metadata.items() if k != "messages"}
    return {
        "index": index,
        "prompt_tokens": len(t.prompt_ids),
        "response_tokens": len(t.response_ids),
        "trained_tokens": t.trained_tokens,
        "calls": len(t.record_ids),
        "record_ids": t.record_ids,
        "repairs": meta.get("repairs", []),
        "finish_reason": meta.get("finish_reason"),
        "truncated": bool(meta.get("truncated")),
        "side_call": meta.get("side_call"),
    }


def trace_tokens(
    built: BuildResult, index: int, records: dict[str, CompletionRecord], vocab: Vocab | None
) -> dict[str, Any]:
    """Every position of one trace: its id, its kind and, where sampled, the logprob the server reported.

    kinds, one character per position: `p` the first call's prompt (context), `c` context between
    sampled spans (tool results, user turns, template glue), `t` sampled and trained here (mask 1),
    `o` sampled but trained in another trace of the session (mask 0 here).
    """
    t = built.traces[index]
    n = len(t.prompt_ids)
    ids = t.prompt_ids + t.response_ids
    kinds = bytearray(b"p" * n + bytes(0x74 if m else 0x63 for m in t.loss_mask))  # t, c
    logprobs: list[float | None] = [None] * len(ids)
    segments = []
    for seg in t.segments:
        r = records.get(seg.record_id)
        sampled = r.completion_logprobs if r is not None else t.response_logprobs[seg.start : seg.end]
        for k, lp in enumerate(sampled[: seg.end - seg.start]):
            logprobs[n + seg.start + k] = lp
            if not seg.trained:
                kinds[n + seg.start + k] = ord("o")
        segments.append(
            {
                "record_id": seg.record_id,
                "seq": r.seq if r is not None else None,
                "start": n + seg.start,
                "end": n + seg.end,
                "trained": seg.trained,
            }
        )
    return {
        "index": index,
        "prompt_len": n,
        "ids": ids,
        "kinds": kinds.decode(),
        "logprobs": logprobs,
        "segments": segments,
        "vocab": vocab.texts(ids) if vocab is not None else None,
        "tokenizer": str(vocab.folder) if vocab is not None else None,
        "metadata": {k: v for k, v in t.metadata.items() if k != "messages"},
    }
