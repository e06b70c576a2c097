"""The tree of a session's calls as the prefix-tree builder placed them, for the page.

A trace is one leaf's chain (`Trace.record_ids`, root first), so the traces of a build spell the tree: a call's
parent is the call before it in any chain that holds it. Each node carries what the builder said about it: the drift
event that placed it (the cause, where the prompt first differed, whether the call was repaired onto its parent's
raw sampled tokens or started a chain of its own), and its role: a chain's start, a sub-agent (its own system
prompt), a compaction, a repaired or an exact continuation; a side call (a session title...) is named as the harness
names it; a call continued by more than one call is a fork. Calls the builder did not place (failed, empty) are
listed apart.
"""

from __future__ import annotations

from typing import Any

from ..records import CompletionRecord
from ..traces import BuildResult, DriftEvent

# drift causes that start a chain, and what the page calls such a chain
CHAIN_ROLES = {"system_prompt": "sub-agent", "compaction": "compaction", "unknown": "new history"}


def chain_tree(records: list[CompletionRecord], built: BuildResult) -> dict[str, Any]:
    """{nodes (call order), roots, chains (= traces), outside (calls in no chain)}; node ids are record ids."""
    by_id = {r.id: r for r in records}
    parent: dict[str, str | None] = {}
    leaf_of: dict[str, int] = {}
    trained_in: dict[str, int] = {}
    shared: dict[str, int] = {}  # how many traces hold the call (more than one: above a fork)
    side: dict[str, str] = {}  # a side call's root (named by the harness: harnesses/base.py) -> its name
    for index, trace in enumerate(built.traces):
        if trace.record_ids and trace.metadata.get("side_call"):
            side[trace.record_ids[0]] = trace.metadata["side_call"]
        for before, rid in zip([None, *trace.record_ids], trace.record_ids, strict=False):
            parent.setdefault(rid, before)
            shared[rid] = shared.get(rid, 0) + 1
        if trace.record_ids:
            leaf_of[trace.record_ids[-1]] = index
        for seg in trace.segments:
            if seg.trained:
                trained_in[seg.record_id] = index
    events = {e.record_id: e for e in built.drift_events}
    children: dict[str, list[str]] = {rid: [] for rid in parent}
    for rid, p in parent.items():
        if p is not None:
            children[p].append(rid)
    order = sorted(parent, key=lambda rid: (by_id[rid].seq, by_id[rid].started_at, rid))
    nodes = [
        _node(by_id[rid], parent[rid], children[rid], events.get(rid), leaf_of.get(rid), trained_in.get(rid), by_id)
        | {"in_traces": shared[rid], "side_call": side.get(rid)}
        for rid in order
    ]
    outside = [
        {"id": r.id, "seq": r.seq, "status": r.status, "why": _why_outside(r)}
        for r in sorted(records, key=lambda r: r.seq)
        if r.id not in parent
    ]
    return {
        "nodes": nodes,
        "roots": [n["id"] for n in nodes if n["parent"] is None],
        "chains": len(built.traces),
        "forks": sum(len(c) > 1 for c in children.values()),
        "outside": outside,
    }


def _node(
    r: CompletionRecord,
    parent: str | None,
    children: list[str],
    event: DriftEvent | None,
    leaf: int | None,
    trained: int | None,
    by_id: dict[str, CompletionRecord],
) -> dict[str, Any]:
    drift = None
    if event is not None:
        drift = {
            "cause": event.cause,
            "repaired": event.repaired,
            "from_id": event.parent_id,
            "from_seq": by_id[event.parent_id].seq if event.parent_id in by_id else None,
            "position": event.position,
            "detail": event.detail,
        }
    return {
        "id": r.id,
        "seq": r.seq,
        "parent": parent,
        "children": sorted(children, key=lambda c: by_id[c].seq),
        "role": _role(parent, event),
        "drift": drift,
        "trace": leaf,
        "trained_in": trained,
        "prompt_tokens": len(r.prompt_token_ids),
        "completion_tokens": len(r.completion_token_ids),
        "dialect": r.dialect,
        "finish_reason": r.finish_reason,
    }


def _role(parent: str | None, event: DriftEvent | None) -> str:
    """How the builder placed the call: a chain's start (a sub-agent, a compaction...), or after its parent."""
    if parent is None:
        if event is not None and not event.repaired:
            return CHAIN_ROLES.get(event.cause, "new chain")
        return "start"
    return "repaired" if event is not None and event.repaired else "continues"


def _why_outside(r: CompletionRecord) -> str:
    if r.status != "ok":
        return r.status + (f": {r.error}" if r.error else "")
    if not r.prompt_token_ids:
        return "no prompt token ids"
    if not r.completion_token_ids:
        return "nothing sampled"
    return "not placed by this builder"
