"""Builders: a session's CompletionRecords -> training traces.

`per_request`: one trace per call. Simple, and what a trainer pays for in the square of the number
of turns, since every call repeats the growing prompt.

`prefix_tree`: every call is placed in a tree of calls, whatever the order of the records. A call's
parent is the earlier call whose prompt + sampled tokens its own prompt extends (the longest); its
path is the parent's path followed by its new prompt tokens and its own sampled tokens. Calls
whose prompt drifted from the parent's (see drift.py) are re-attached after the parent's raw
sampled tokens when the drift is a template quirk, and start a new chain otherwise. Each leaf of
the tree is one trace: sampled spans carry mask 1 and their recorded logprobs, everything between
them mask 0, and a span shared by several leaves is trained in the first of them only, so every
sampled token is trained exactly once. Compaction and sub-agents add chains; nothing is dropped.

Each is a `Builder` named in `traces.BUILDERS`; a task may name its own subclass as
'package.module:Class'.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..errors import TraceBuildError
from ..plugins import Plugin
from ..records import CompletionRecord
from .drift import REPAIRABLE, align
from .models import BuildStats, DriftEvent, Repair, Segment, Trace

_CLOSING = ("stop", "tool_calls", "stop_sequence", "end_turn")


@dataclass
class _Node:
    record: CompletionRecord
    glue: list[int]  # the tokens between the parent's sample and this one (a root's: its prompt)
    span: tuple[int, int]  # this call's sampled tokens in its path (the chain's glue and samples, in order)
    index: int  # arrival order
    parent: _Node | None = None
    children: list[_Node] = field(default_factory=list)
    repair: Repair | None = None

    def path(self) -> list[int]:
        """Every token up to and including this call's sample; built for leaves only, so a session's
        tree holds each token once, not once per call."""
        tokens: list[int] = []
        for node in self.chain():
            tokens += node.glue
            tokens += node.record.completion_token_ids
        return tokens

    def chain(self) -> list[_Node]:
        nodes, node = [], self
        while node is not None:
            nodes.append(node)
            node = node.parent
        return nodes[::-1]


class Builder(Plugin, ABC):
    """Trainable records of one session -> traces. `events` collects the drift it met (see drift.py)."""

    kind = "builder"

    @abstractmethod
    def traces(
        self,
        records: list[CompletionRecord],
        stats: BuildStats,
        events: list[DriftEvent],
        *,
        tokenizer: Any = None,
        eot_token_id: int | None = None,
        repair: bool = True,
    ) -> list[Trace]: ...


class PrefixTree(Builder):  # the default, first in the registry (`polar traces --builder`)
    name = "prefix_tree"

    def traces(self, records, stats, events, *, tokenizer=None, eot_token_id=None, repair=True) -> list[Trace]:
        eot = end_of_turn(records, tokenizer, eot_token_id)
        return prefix_tree(records, stats, events, eot, tokenizer, repair)


class PerRequest(Builder):
    name = "per_request"

    def traces(self, records, stats, events, *, tokenizer=None, eot_token_id=None, repair=True) -> list[Trace]:
        return per_request(records, stats)


def trainable(records: list[CompletionRecord], stats: BuildStats) -> list[CompletionRecord]:
    """The ok records with sampled tokens; a sampled span without aligned logprobs is an error."""
    kept = []
    skipped: Counter[str] = Counter()
    for r in records:
        if r.status != "ok" or not r.prompt_token_ids:
            skipped[r.status if r.status != "ok" else "no_prompt_ids"] += 1
            continue
        if len(r.completion_logprobs) != len(r.completion_token_ids):
            raise TraceBuildError(
                f"record {r.id} (session {r.session_id}, call {r.seq}) has {len(r.completion_token_ids)} sampled "
                f"tokens but {len(r.completion_logprobs)} logprobs: its tokens cannot be trained faithfully"
            )
        if not r.completion_token_ids:
            skipped["empty_completion"] += 1
            continue
        kept.append(r)
    stats.records, stats.trainable, stats.skipped = len(records), len(kept), dict(skipped)
    return kept


def end_of_turn(records: list[CompletionRecord], tokenizer=None, eot_token_id: int | None = None) -> int | None:
    """The end-of-turn token: given, or the last sampled token of calls that ended on their own."""
    if eot_token_id is not None:
        return eot_token_id
    ends = Counter(
        r.completion_token_ids[-1] for r in records if r.finish_reason in _CLOSING and r.completion_token_ids
    )
    if ends:
        return ends.most_common(1)[0][0]
    return getattr(tokenizer, "eos_token_id", None)


def per_request(records: list[CompletionRecord], stats: BuildStats) -> list[Trace]:
    traces = []
    for r in records:
        n = len(r.completion_token_ids)
        traces.append(
            Trace(
                prompt_ids=list(r.prompt_token_ids),
                response_ids=list(r.completion_token_ids),
                loss_mask=[1] * n,
                response_logprobs=list(r.completion_logprobs),
                record_ids=[r.id],
                segments=[Segment(record_id=r.id, start=0, end=n, trained=True)],
                metadata={"finish_reason": r.finish_reason, "seq": [r.seq]},
            )
        )
    stats.roots = len(records)
    return traces


def prefix_tree(
    records: list[CompletionRecord],
    stats: BuildStats,
    events: list[DriftEvent],
    eot: int | None,
    tokenizer=None,
    repair: bool = True,
) -> list[Trace]:
    # in arrival order, which is causal: a call can only continue turns that came back before it.
    # Where the list puts them does not matter, so interleaved sub-agents give the same tree.
    ordered = sorted(records, key=lambda r: (r.seq, r.started_at, r.id))
    nodes: list[_Node] = []
    for r in ordered:
        nodes.append(_place(r, nodes, events, eot, tokenizer, repair))
    stats.roots = sum(n.parent is None for n in nodes)
    stats.merged = len(nodes) - stats.roots
    return _traces([n for n in nodes if not n.children])


def _place(
    r: CompletionRecord, nodes: list[_Node], events: list[DriftEvent], eot: int | None, tokenizer, repair: bool
) -> _Node:
    prompt = r.prompt_token_ids
    base = _longest_exact(prompt, nodes)
    floor = _seen(base) if base is not None else -1
    # a later call this one continues after a template quirk beats an older exact ancestor
    later = nodes[base.index + 1 :] if base is not None else nodes  # nodes are in arrival order
    parent, found = _closest(prompt, later, eot, tokenizer)
    fixable = found is not None and repair and found.cause in REPAIRABLE and found.resume is not None
    if parent is not None and found is not None and found.position >= floor:
        events.append(
            DriftEvent(
                record_id=r.id,
                parent_id=parent.record.id,
                position=found.position,
                cause=found.cause or "unknown",
                repaired=fixable,
                detail=found.detail,
            )
        )
    index = len(nodes)  # the node placed is the next in arrival order
    if not fixable:
        return _attach(r, base, prompt[floor:], index) if base is not None else _root(r, index)
    glue = ([eot] if found.close_turn and eot is not None else []) + prompt[found.resume :]
    node = _attach(r, parent, glue, index)
    node.repair = Repair(record_id=r.id, cause=found.cause, detail=found.detail)
    return node


def _seen(node: _Node) -> int:
    return len(node.record.prompt_token_ids) + len(node.record.completion_token_ids)


def _longest_exact(prompt: list[int], nodes: list[_Node]) -> _Node | None:
    """The earlier call with the most tokens (the first to arrive, among equals) whose prompt + sample
    this prompt extends exactly. Tried longest first, so a chain's next call checks its parent alone;
    one whose last tokens differ is passed over without comparing the rest."""
    fits = [n for n in nodes if _seen(n) <= len(prompt)]
    for node in sorted(fits, key=lambda n: (-_seen(n), n.index)):
        if _extends(prompt, node.record):
            return node
    return None


def _extends(prompt: list[int], parent: CompletionRecord) -> bool:
    p, s = parent.prompt_token_ids, parent.completion_token_ids
    n = len(p) + len(s)
    if n > len(prompt) or (s and prompt[n - 1] != s[-1]) or (p and prompt[len(p) - 1] != p[-1]):
        return False
    return prompt[: len(p)] == p and prompt[len(p) : n] == s


def _closest(prompt: list[int], nodes: list[_Node], eot: int | None, tokenizer):
    """The latest earlier call this prompt continues after a repairable drift, else the call it shares the
    most tokens with, and how it diverges; None when it shares nothing. `nodes` are in arrival order."""
    best, best_alignment, best_key = None, None, None
    for index in range(len(nodes) - 1, -1, -1):  # latest first: a repairable one ends the search
        n = nodes[index]
        a = align(n.record.prompt_token_ids, n.record.completion_token_ids, prompt, eot, tokenizer)
        if a.position == len(prompt):  # the same or a shorter prompt: a retry or a sibling, not drift
            continue
        if a.cause in REPAIRABLE and a.resume is not None:
            return n, a
        if best_key is None or (a.position, index) > best_key:
            best, best_alignment, best_key = n, a, (a.position, index)
    if best_alignment is None or best_alignment.position == 0:
        return None, None
    return best, best_alignment


def _root(r: CompletionRecord, index: int) -> _Node:
    start = len(r.prompt_token_ids)
    return _Node(r, r.prompt_token_ids, (start, start + len(r.completion_token_ids)), index)


def _attach(r: CompletionRecord, parent: _Node, glue: list[int], index: int) -> _Node:
    start = parent.span[1] + len(glue)
    node = _Node(r, glue, (start, start + len(r.completion_token_ids)), index, parent)
    parent.children.append(node)
    return node


def _traces(leaves: list[_Node]) -> list[Trace]:
    leaves = sorted(leaves, key=lambda n: (n.chain()[0].record.seq, n.record.seq, n.record.id))
    trained: set[str] = set()
    traces = []
    for leaf in leaves:
        chain = leaf.chain()
        path = leaf.path()
        prompt_len = chain[0].span[0]
        mask = [0] * (len(path) - prompt_len)
        logprobs = [0.0] * len(mask)
        segments = []
        for node in chain:
            start, end = node.span[0] - prompt_len, node.span[1] - prompt_len
            first = node.record.id not in trained
            if first:
                trained.add(node.record.id)
                mask[start:end] = [1] * (end - start)
                logprobs[start:end] = node.record.completion_logprobs
            segments.append(Segment(record_id=node.record.id, start=start, end=end, trained=first))
        traces.append(
            Trace(
                prompt_ids=path[:prompt_len],
                response_ids=path[prompt_len:],
                loss_mask=mask,
                response_logprobs=logprobs,
                record_ids=[n.record.id for n in chain],
                segments=segments,
                metadata={
                    "finish_reason": leaf.record.finish_reason,
                    "seq": [n.record.seq for n in chain],
                    "repairs": [n.repair.model_dump() for n in chain if n.repair is not None],
                },
            )
        )
    return traces
