"""Training traces: what a trainer consumes, built from a session's CompletionRecords.

Invariant: every response position with `loss_mask` 1 holds exactly the token the server sampled,
with the logprob the server reported. Positions with mask 0 (tool results, user turns, template
glue, sampled spans already trained in another trace) carry logprob 0.0.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class Segment(BaseModel):
    """One model call's sampled span inside a trace's response (`start`, `end` index response_ids)."""

    record_id: str
    start: int
    end: int
    trained: bool = Field(description="False when the same span is trained in another trace of the session")


class Repair(BaseModel):
    record_id: str
    cause: str
    detail: str = ""


class Trace(BaseModel):
    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[int]
    response_logprobs: list[float]
    record_ids: list[str]
    segments: list[Segment]
    reward: float | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)  # finish_reason, repairs, truncated, ...

    @property
    def trained_tokens(self) -> int:
        return sum(self.loss_mask)


class DriftEvent(BaseModel):
    """A call whose prompt does not extend an earlier prompt + completion, and why."""

    record_id: str
    parent_id: str
    position: int = Field(description="first differing token index in the call's prompt")
    cause: str
    repaired: bool
    detail: str = ""


class BuildStats(BaseModel):
    records: int = 0  # all records of the session
    trainable: int = 0  # ok records with tokens
    skipped: dict[str, int] = Field(default_factory=dict)  # by record status
    traces: int = 0
    merged: int = 0  # records that continued another record's chain
    roots: int = 0  # records that started a chain
    drift: dict[str, int] = Field(default_factory=dict)  # drift events by cause
    repaired: dict[str, int] = Field(default_factory=dict)
    trace_tokens: int = 0  # prompt + response tokens over all traces (what a trainer processes)
    unique_tokens: int = 0  # distinct trie positions: the floor for trainer load
    trained_tokens: int = 0  # mask-1 positions: equals the sampled tokens of the trainable records
    truncated: int = 0  # traces cut by the length policy


class BuildResult(BaseModel):
    builder: str
    traces: list[Trace]
    stats: BuildStats
    drift_events: list[DriftEvent] = Field(default_factory=list)
