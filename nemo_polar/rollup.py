"""A session's rollup: what its calls cost, kept with the session and shown by `polar status` and
`polar view`.

    calls, calls_by_status        every call the proxy recorded, failed ones included
    prompt_tokens                 summed over calls (what the inference server prefilled)
    completion_tokens             summed over calls (what it sampled)
    trained_tokens                mask-1 positions of the session's traces (the builder's count)
    model_s                       wall time with at least one model call in flight (overlapping
                                  sub-agent calls count once)
    tools_s                       wall time between the first call's start and the last call's end
                                  with no call in flight: the harness running its tools, thinking
                                  in its own process

The stage times (queued, INIT, READY, RUN, POST-RUN) are the session result's `timing`, not copied
here; `view(rollup, timing)` puts the two side by side, and `harness_s` (RUN less model and tools
time: the harness starting and exiting) is derived there.

Part of the shared layer: it imports `records` only, and reads a timing as a mapping.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, Field

from .records import CompletionRecord

STAGES = ("queued_s", "init_s", "ready_wait_s", "run_s", "postrun_s")
SUMMED = ("calls", "prompt_tokens", "completion_tokens", "trained_tokens", "model_s", "tools_s")  # add up


class Rollup(BaseModel):
    calls: int = 0
    calls_by_status: dict[str, int] = Field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    trained_tokens: int = 0
    model_s: float = Field(0.0, description="wall time with a model call in flight")
    tools_s: float = Field(0.0, description="wall time between calls with none in flight")


def rollup(records: Iterable[CompletionRecord], trained_tokens: int = 0) -> Rollup:
    """The rollup of one session's records; `trained_tokens` is its build's `stats.trained_tokens`."""
    return rollup_rows((_row(r) for r in records), trained_tokens)


def _row(r: CompletionRecord) -> tuple[str, int, int, float, float]:
    prompt = len(r.prompt_token_ids) or r.usage.get("prompt_tokens", 0)
    completion = len(r.completion_token_ids) or r.usage.get("completion_tokens", 0)
    return r.status, prompt, completion, r.started_at, r.finished_at


def rollup_rows(rows: Iterable[tuple[str, int, int, float, float]], trained_tokens: int = 0) -> Rollup:
    """`rollup` over (status, prompt tokens, completion tokens, started_at, finished_at) per call: what a
    reader that skips parsing whole records (the viewer, over thousands of calls) passes."""
    status: Counter[str] = Counter()
    prompt = completion = 0
    spans = []
    for st, p, c, start, end in rows:
        status[st] += 1
        prompt, completion = prompt + p, completion + c
        spans.append((start, max(start, end)))
    model_s, tools_s = busy_and_idle(spans)
    return Rollup(
        calls=sum(status.values()),
        calls_by_status=dict(status),
        prompt_tokens=prompt,
        completion_tokens=completion,
        trained_tokens=trained_tokens,
        model_s=round(model_s, 3),
        tools_s=round(tools_s, 3),
    )


def busy_and_idle(spans: Iterable[tuple[float, float]]) -> tuple[float, float]:
    """(time covered by the spans, time between them), from the first start to the last end."""
    busy = idle = 0.0
    end: float | None = None
    for s, e in sorted(spans):
        if end is None or s > end:
            idle += 0.0 if end is None else s - end
            busy += e - s
            end = e
        elif e > end:
            busy += e - end
            end = e
    return busy, idle


def view(rollup: Rollup | Mapping[str, Any] | None, timing: Mapping[str, Any] | None) -> dict[str, Any]:
    """The rollup beside the stage times, as `polar status` and `polar view` show it: `stages` in seconds,
    and `harness_s`, the part of RUN that is neither the model nor tools (the harness starting, exiting)."""
    out = dict(rollup.model_dump() if isinstance(rollup, Rollup) else (rollup or {}))
    stages = {k: round(float((timing or {}).get(k) or 0.0), 3) for k in STAGES}
    run = stages["run_s"]
    harness = run - out.get("model_s", 0.0) - out.get("tools_s", 0.0) if out and run else None
    return out | {"stages": stages, "harness_s": None if harness is None else round(max(0.0, harness), 3)}


def total(rollups: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Sums over sessions (a task, a run): counts and seconds add up."""
    keys = SUMMED
    sums: dict[str, Any] = dict.fromkeys(keys, 0)
    n = 0
    for r in rollups:
        n += 1
        for k in keys:
            sums[k] += r.get(k) or 0
    sums["model_s"], sums["tools_s"] = round(sums["model_s"], 3), round(sums["tools_s"], 3)
    return sums | {"sessions": n}


COLUMNS = ("calls", "prompt tok", "sampled tok", "trained tok", "model s", "tools s", "harness s", "INIT s", "RUN s")


def kept(result: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The rollup a session result carries; for a result from before rollups, what its build stats say
    (calls and trained tokens)."""
    result = result or {}
    if result.get("rollup"):
        return dict(result["rollup"])
    stats = result.get("stats") or {}
    if stats.get("records") is None:
        return None
    return {"calls": stats["records"], "trained_tokens": stats.get("trained_tokens", 0)}


def cells(result: Mapping[str, Any] | None) -> list[str]:
    """A session result's rollup as `polar status` prints it, one string per `COLUMNS` ("-" where unknown)."""
    result = result or {}
    shown = view(kept(result), result.get("timing"))
    keys = ("calls", "prompt_tokens", "completion_tokens", "trained_tokens")
    counts = ["-" if shown.get(k) is None else f"{shown[k]:,}" for k in keys]
    times = [shown.get("model_s"), shown.get("tools_s"), shown.get("harness_s")]
    times += [shown["stages"]["init_s"], shown["stages"]["run_s"]] if result.get("timing") else [None, None]
    return counts + ["-" if t is None else f"{t:.2f}" for t in times]
