"""The figures of `polar bench merge`: one session's through the three builders, and the report over all.

The figures (sums over sessions):
- samples: traces, i.e. trainer rows. `samples_ratio` = per_request samples / prefix_tree samples.
- trace_tokens: prompt + response tokens of every trace, what a trainer processes ("tokens
  trained"). unique_tokens: distinct positions of the trie over a builder's traces, the floor.
  `trained_over_unique` = prefix_tree trace_tokens / prefix_tree unique_tokens (floor 1.0).
- trained_tokens: mask-1 positions; dropped_tokens: sampled tokens of trainable calls that no
  trace trains (sampled - trained).
- `false_forks`: over generated sessions, the traces a builder makes beyond the real chains: chain
  roots beyond them (`false_roots`) plus, for prefix_tree, leaves beyond one per root
  (`false_branches`: a call attached to an earlier call than the one it continues, so the tree
  forks where the session did not). Roots alone would miss the second kind, which costs a sample
  and repeats the shared prefix just the same. Roots short of the real chains: `false_merges`.
- `build_tokens_per_s`: prompt + completion tokens of all records / wall time of the prefix_tree
  builds (generation and the other builders are not timed in it).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from .linear_chain import LinearResult
from .merge_corpus import Case

TARGETS = {"samples_ratio": (">=", 5.4), "trained_over_unique": ("<=", 1.05), "false_forks": ("==", 0)}
BUILDERS = ("per_request", "linear_chain", "prefix_tree")


@dataclass
class Figures:
    samples: int = 0
    trace_tokens: int = 0
    trained_tokens: int = 0
    unique_tokens: int = 0
    dropped_tokens: int = 0

    def add(self, other: Figures) -> None:
        for k in vars(self):
            setattr(self, k, getattr(self, k) + getattr(other, k))


@dataclass
class Measured:
    """One session through the three builders."""

    case: Case
    figures: dict[str, Figures]
    record_tokens: int
    roots: int  # prefix_tree chains
    drift: Counter
    repaired: Counter
    linear: LinearResult
    seconds: dict[str, float]
    sampled: int = 0  # the session's sampled tokens
    primary_trained: int = 0  # of them, those its primary chain trains (what NeMo-RL's Gym row holds today)

    def false_roots(self, builder: str) -> int:
        chains = self.roots if builder == "prefix_tree" else self.linear.chains
        return max(0, chains - (self.case.real_chains or 0))

    def false_branches(self, builder: str) -> int:
        """Leaves beyond one per chain (the linear chains have none)."""
        return self.figures[builder].samples - self.roots if builder == "prefix_tree" else 0

    def false_forks(self, builder: str) -> int:
        return self.false_roots(builder) + self.false_branches(builder)

    def false_merges(self) -> int:
        return max(0, (self.case.real_chains or 0) - self.roots)


def report(measured: list[Measured]) -> dict[str, Any]:
    builders = _totals(measured)
    pr, tree = builders["per_request"], builders["prefix_tree"]
    generated = [m for m in measured if m.case.source == "generated"]
    tree_s = sum(m.seconds["prefix_tree"] for m in measured)
    headline = {
        "samples_ratio": _ratio(pr["samples"], tree["samples"]),
        "trained_over_unique": _ratio(tree["trace_tokens"], tree["unique_tokens"]),
        "false_forks": sum(m.false_forks("prefix_tree") for m in generated),
        # the sampled tokens trained: by the primary chain alone (one Gym row), and by every chain
        "trained_share_primary": _ratio(sum(m.primary_trained for m in measured), sum(m.sampled for m in measured)),
        "trained_share_every_chain": _ratio(tree["trained_tokens"], sum(m.sampled for m in measured)),
        "build_tokens_per_s": round(sum(m.record_tokens for m in measured) / tree_s) if tree_s else None,
    }
    builders["linear_chain"] |= _linear_extra(measured, generated)
    builders["prefix_tree"] |= _tree_extra(measured, generated)
    return {
        **headline,
        "targets": {k: f"{op} {v}" for k, (op, v) in TARGETS.items()},
        "targets_met": {k: _met(headline[k], op, v) for k, (op, v) in TARGETS.items()},
        "corpus": _corpus(measured),
        "builders": builders,
        "by_source": {
            src: _totals([m for m in measured if m.case.source == src]) for src in ("generated", "recorded")
        },
        "per_template": _grouped(generated, lambda m: m.case.template),
        "per_habit": _grouped(generated, lambda m: m.case.habit),
    }


def _ratio(a: int, b: int) -> float | None:
    return round(a / b, 4) if b else None


def _met(value, op: str, target: float) -> bool | None:
    if value is None:
        return None
    return {">=": value >= target, "<=": value <= target, "==": value == target}[op]


def _totals(measured: list[Measured]) -> dict[str, dict[str, int]]:
    totals = {b: Figures() for b in BUILDERS}
    for m in measured:
        for b in BUILDERS:
            totals[b].add(m.figures[b])
    return {b: dict(vars(f)) for b, f in totals.items()}


def _linear_extra(measured: list[Measured], generated: list[Measured]) -> dict[str, Any]:
    breaks: Counter = Counter()
    for m in measured:
        breaks.update(m.linear.breaks)
    return {
        "dropped_calls": sum(m.linear.dropped_calls for m in measured),
        "truncated_chains": sum(m.linear.truncated for m in measured),
        "breaks": dict(breaks),
        "false_forks": sum(m.false_forks("linear_chain") for m in generated),
    }


def _tree_extra(measured: list[Measured], generated: list[Measured]) -> dict[str, Any]:
    drift, repaired = Counter(), Counter()
    for m in measured:
        drift.update(m.drift)
        repaired.update(m.repaired)
    forked = [m for m in generated if m.false_forks("prefix_tree") or m.false_merges()]
    return {
        "roots": sum(m.roots for m in measured),
        "false_forks": sum(m.false_forks("prefix_tree") for m in generated),
        "false_roots": sum(m.false_roots("prefix_tree") for m in generated),
        "false_branches": sum(m.false_branches("prefix_tree") for m in generated),
        "false_merges": sum(m.false_merges() for m in generated),
        "drift": dict(drift),
        "repaired": dict(repaired),
        "miscounted_sessions": [
            {
                "session_id": m.case.session_id,
                "template": m.case.template,
                "habit": m.case.habit,
                "roots": m.roots,
                "traces": m.figures["prefix_tree"].samples,
                "real_chains": m.case.real_chains,
                "drift": dict(m.drift),
                "repaired": dict(m.repaired),
            }
            for m in forked
        ],
    }


def _grouped(measured: list[Measured], key) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[Measured]] = {}
    for m in measured:
        groups.setdefault(key(m), []).append(m)
    out = {}
    for name, ms in sorted(groups.items()):
        drift, repaired = Counter(), Counter()
        for m in ms:
            drift.update(m.drift)
            repaired.update(m.repaired)
        out[name] = {
            "sessions": len(ms),
            "calls": sum(len(m.case.records) for m in ms),
            **{f"{b}_samples": sum(m.figures[b].samples for m in ms) for b in BUILDERS},
            "prefix_tree_trained_over_unique": _ratio(
                sum(m.figures["prefix_tree"].trace_tokens for m in ms),
                sum(m.figures["prefix_tree"].unique_tokens for m in ms),
            ),
            "false_forks": sum(m.false_forks("prefix_tree") for m in ms),
            "linear_chain_false_forks": sum(m.false_forks("linear_chain") for m in ms),
            "drift": dict(drift),
            "repaired": dict(repaired),
        }
    return out


def _corpus(measured: list[Measured]) -> dict[str, Any]:
    gen = [m.case for m in measured if m.case.source == "generated"]
    rec = [m.case for m in measured if m.case.source == "recorded"]
    turns = [c.turns for c in gen]
    return {
        "sessions_generated": len(gen),
        "sessions_recorded": len(rec),
        "calls": sum(len(m.case.records) for m in measured),
        "calls_generated": sum(len(c.records) for c in gen),
        "calls_recorded": sum(len(c.records) for c in rec),
        "turns_range": [min(turns), max(turns)] if turns else None,
        "templates": dict(Counter(c.template for c in gen)),
        "habits": dict(Counter(c.habit for c in gen)),
        "compactions": sum(c.compactions for c in gen),
        "subagents": sum(c.subagents for c in gen),
        "real_chains": sum(c.real_chains or 0 for c in gen),
        "record_tokens": sum(m.record_tokens for m in measured),
    }
