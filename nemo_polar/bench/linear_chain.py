"""The reference's linear chains (research/polar.md 3.4): the baseline `polar bench merge` compares against.

Records in (finished_at, id) order (the reference's save-time order) join the open chain whose
tip (its last call's prompt) is the longest prefix of their prompt, else open a new chain; a
chain then becomes one trace: the first prompt, each call's raw sampled tokens, and between
two calls the next prompt's tail after its first end-of-turn token (from it, when the previous
sample has none). Where that fails (the prompt stops extending the previous one, no end-of-turn
token is known or found in the tail) the chain is truncated and its remaining calls dropped.
Note the grouping already sends every prompt that does not extend a tip to a new chain, so a
template quirk costs the reference an extra sample (a false fork) rather than dropped calls.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ..records import CompletionRecord
from ..traces.builders import trainable
from ..traces.drift import common_prefix
from ..traces.models import BuildStats, Segment, Trace

_CLOSING = ("stop", "tool_calls", "stop_sequence")  # the reference's end-of-turn evidence


@dataclass
class LinearResult:
    traces: list[Trace]
    chains: int = 0
    truncated: int = 0  # chains cut at a break
    dropped_calls: int = 0
    breaks: Counter = field(default_factory=Counter)


def linear_chains(records: list[CompletionRecord], eot_token_id: int | None = None) -> LinearResult:
    kept = sorted(trainable(records, BuildStats()), key=lambda r: (r.finished_at, r.id))
    chains: list[list[CompletionRecord]] = []
    for r in kept:
        best = _longest_tip(r.prompt_token_ids, chains)
        if best is None:
            chains.append([r])
        else:
            best.append(r)
    out = LinearResult(traces=[], chains=len(chains))
    for chain in chains:
        out.traces.append(_linear_trace(chain, eot_token_id, out))
    return out


def _longest_tip(prompt: list[int], chains: list[list[CompletionRecord]]) -> list[CompletionRecord] | None:
    best, best_len = None, 0
    for chain in chains:
        tip = chain[-1].prompt_token_ids
        if best_len < len(tip) <= len(prompt) and common_prefix(prompt, tip) == len(tip):
            best, best_len = chain, len(tip)
    return best


def _linear_trace(chain: list[CompletionRecord], eot: int | None, out: LinearResult) -> Trace:
    first = chain[0]
    if eot is None:  # the first call of the chain that ended on its own ends with the end-of-turn token
        eot = next((r.completion_token_ids[-1] for r in chain if r.finish_reason in _CLOSING), None)
    trace = Trace(
        prompt_ids=list(first.prompt_token_ids),
        response_ids=[],
        loss_mask=[],
        response_logprobs=[],
        record_ids=[],
        segments=[],
    )
    _add_sample(trace, first)
    for k, (prev, cur) in enumerate(zip(chain, chain[1:], strict=False)):
        glue, why = _interstitial(prev, cur, eot)
        if glue is None:  # the reference keeps the chain up to here and drops the rest
            out.truncated += 1
            out.dropped_calls += len(chain) - 1 - k
            out.breaks[why] += 1
            break
        trace.response_ids += glue
        trace.loss_mask += [0] * len(glue)
        trace.response_logprobs += [0.0] * len(glue)
        _add_sample(trace, cur)
    return trace


def _add_sample(trace: Trace, r: CompletionRecord) -> None:
    start = len(trace.response_ids)
    trace.response_ids += r.completion_token_ids
    trace.loss_mask += [1] * len(r.completion_token_ids)
    trace.response_logprobs += r.completion_logprobs
    trace.segments.append(Segment(record_id=r.id, start=start, end=len(trace.response_ids), trained=True))
    trace.record_ids.append(r.id)


def _interstitial(prev: CompletionRecord, cur: CompletionRecord, eot: int | None) -> tuple[list[int] | None, str]:
    """The tokens between two calls of a chain: after the re-rendered previous turn's end-of-turn."""
    p = prev.prompt_token_ids
    if common_prefix(cur.prompt_token_ids, p) != len(p):
        return None, "canonical_prefix_break"
    if eot is None:
        return None, "eot_unavailable"
    tail = cur.prompt_token_ids[len(p) :]
    if eot not in tail:
        return None, "interstitial_split_failed"
    at = tail.index(eot)
    closed = prev.completion_token_ids[-1:] == [eot]  # else the end-of-turn closes the cut turn
    return tail[at + 1 :] if closed else tail[at:], ""
