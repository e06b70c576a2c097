"""Training traces from a session's CompletionRecords: builders (named in `BUILDERS`; a task may name its
own `Builder` subclass as `"package.module:Class"`), drift analysis, exports."""

from __future__ import annotations

from collections import Counter

from ..plugins import Registry
from ..records import CompletionRecord
from . import builders
from .builders import Builder, trainable
from .drift import common_prefix
from .models import BuildResult, BuildStats, DriftEvent, Segment, Trace

BUILDERS: Registry[Builder] = Registry("builder", Builder, builders.__name__)


def build(
    records: list[CompletionRecord],
    builder: str = "prefix_tree",
    *,
    tokenizer=None,
    eot_token_id: int | None = None,
    max_tokens: int | None = None,
    repair: bool = True,
) -> BuildResult:
    """A session's records as traces, by the builder a task names (`BUILDERS`)."""
    maker = BUILDERS.make(builder)
    stats = BuildStats()
    kept = trainable(records, stats)
    events: list[DriftEvent] = []
    traces = maker.traces(kept, stats, events, tokenizer=tokenizer, eot_token_id=eot_token_id, repair=repair)
    if max_tokens is not None:
        traces = [keep_causal_prefix(t, max_tokens) for t in traces]
    stats.traces = len(traces)
    stats.drift = dict(Counter(e.cause for e in events))
    stats.repaired = dict(Counter(e.cause for e in events if e.repaired))
    stats.trace_tokens = sum(len(t.prompt_ids) + len(t.response_ids) for t in traces)
    stats.unique_tokens = unique_tokens(traces)
    stats.trained_tokens = sum(t.trained_tokens for t in traces)
    stats.truncated = sum(bool(t.metadata.get("truncated")) for t in traces)
    return BuildResult(builder=builder, traces=traces, stats=stats, drift_events=events)


def keep_causal_prefix(trace: Trace, max_tokens: int) -> Trace:
    """An over-long trace keeps its prompt and the first response tokens; the prompt is never cut."""
    room = max(0, max_tokens - len(trace.prompt_ids))
    if len(trace.response_ids) <= room:
        return trace
    segments = [s.model_copy(update={"end": min(s.end, room)}) for s in trace.segments if s.start < room]
    return trace.model_copy(
        update={
            "response_ids": trace.response_ids[:room],
            "loss_mask": trace.loss_mask[:room],
            "response_logprobs": trace.response_logprobs[:room],
            "segments": segments,
            "record_ids": [s.record_id for s in segments],
            "metadata": trace.metadata | {"truncated": True, "dropped_tokens": len(trace.response_ids) - room},
        }
    )


def unique_tokens(traces: list[Trace]) -> int:
    """Distinct positions over all traces (a trie count): the floor for what a trainer must process."""
    return trie_size([t.prompt_ids + t.response_ids for t in traces])


def trie_size(sequences: list[list[int]]) -> int:
    """The nodes of the sequences' trie (their distinct non-empty prefixes): once sorted, each sequence
    adds its length less what it shares with the one before, with no walk per token."""
    ordered = sorted(sequences)
    shared = sum(common_prefix(a, b) for a, b in zip(ordered, ordered[1:], strict=False))
    return sum(map(len, ordered)) - shared


__all__ = ["BUILDERS", "BuildResult", "Builder", "BuildStats", "DriftEvent", "Segment", "Trace", "build"]
