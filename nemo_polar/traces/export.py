"""Traces out of nemo_polar: as NeMo Gym `/run` output items, and as JSONL.

NeMo Gym output (`gym_output_items`, `gym_response`, `gym_result`)
-------------------------------------------------------------------
One trace becomes the `response.output` of one NeMo Gym rollout, shaped as Gym's `vllm_model`
server shapes it, so NeMo-RL flattens it back into exactly the trace: one model call per *trained*
segment, with `prompt_token_ids` = the trace's `prompt_ids` + the `response_ids` before the
segment, `generation_token_ids` = the segment's tokens and `generation_log_probs` = their logprobs,
all three on the call's last item. Untrained segments (sampled spans trained in another trace)
are not calls here: their tokens are part of the next call's prompt, masked like tool output.
Response tokens after the last trained token are not in the output (NeMo-RL drops them anyway);
a call that sampled no tokens is an item with empty generation_token_ids, which NeMo-RL skips.
NeMo-RL's own post-processing of the result gives `prompt_ids + response_ids[:end]` with `loss_mask` and
`response_logprobs` on the response part (tests/traces/test_export.py runs it on every export shape).

Every chain (`training_traces`, `envelope_trace`)
-------------------------------------------------
NeMo Gym's `training_traces` envelope (version 1, as far as it is public: Gym PR #3212), one entry per chain:

    schema_version   1
    rollout_id       the session id
    builder          "prefix_merging" (our prefix_tree) or "per_request"
    traces           [{trace_id: "<rollout_id>:<last call id>", model_call_ids: [str], token_ids: [int],
                       generation_logprobs: [float], loss_mask: [0|1], sampled_spans: [{model_call_id, start,
                       end, owned}], side_call: str | null}]

`token_ids` is the chain's whole sequence (first prompt, then everything after it); `generation_logprobs` and
`loss_mask` are aligned with it. A sampled span is `token_ids[start:end]`; each is `owned` (loss 1) in exactly
one trace of the rollout, so a span two chains share through the prefix merge is trained once. Where the public
shape left a choice: span offsets index `token_ids` (not the call's response), `owned` says which trace trains a
span, and `side_call` names a harness's side call (harnesses/base.py).

JSONL (`write_jsonl`, `read_jsonl`)
-----------------------------------
One trace per line, UTF-8 JSON, keys in this order (the schema is stable; new keys may be added,
none removed or renamed):

    session_id         str | null   the session the traces were built from
    trace_index        int          position of the trace in the build result, from 0
    prompt_ids         [int]        the first call's prompt: context, never trained
    response_ids       [int]        everything after the prompt: sampled spans and the tokens between
    loss_mask          [0|1]        one per response token; 1 = a sampled token trained in this trace
    response_logprobs  [float]      one per response token; the server's logprob where loss_mask is 1,
                                    0.0 elsewhere
    record_ids         [str]        the CompletionRecords the trace was built from, in order
    segments           [{record_id: str, start: int, end: int, trained: bool}]
                                    each call's sampled span, response_ids[start:end]; trained=false when
                                    the span is trained in another trace of the session
    reward             float | null the rollout's reward, if known
    metadata           object       finish_reason, repairs, truncated, ...

NaN or infinite numbers are refused (JSON has none); lengths are checked on write and on read.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable, Mapping
from typing import Any

from .models import BuildResult, Segment, Trace

JSONL_KEYS = (
    "session_id",
    "trace_index",
    "prompt_ids",
    "response_ids",
    "loss_mask",
    "response_logprobs",
    "record_ids",
    "segments",
    "reward",
    "metadata",
)


# --- checks -----------------------------------------------------------------------------------
def check_trace(trace: Trace, where: str = "trace") -> None:
    """Raise ValueError unless the per-token lists and the segments fit the response."""
    n = len(trace.response_ids)
    if len(trace.loss_mask) != n or len(trace.response_logprobs) != n:
        raise ValueError(
            f"{where}: {n} response_ids, {len(trace.loss_mask)} loss_mask, "
            f"{len(trace.response_logprobs)} response_logprobs (must be equal)"
        )
    if any(m not in (0, 1) for m in trace.loss_mask):
        raise ValueError(f"{where}: loss_mask holds values other than 0 and 1")
    for seg in trace.segments:
        if not 0 <= seg.start <= seg.end <= n:
            raise ValueError(f"{where}: segment {seg.record_id} [{seg.start}, {seg.end}) is outside 0..{n}")


def _trained_segments(trace: Trace) -> list[Segment]:
    """The trained segments in order; they must cover exactly the mask-1 positions.

    Otherwise the Gym output would train tokens the trace masks, or silently drop trained ones.
    """
    trained = sorted((s for s in trace.segments if s.trained), key=lambda s: s.start)
    covered = [0] * len(trace.response_ids)
    for seg in trained:
        if any(covered[seg.start : seg.end]):
            raise ValueError(f"trained segments overlap at {seg.record_id} [{seg.start}, {seg.end})")
        covered[seg.start : seg.end] = [1] * (seg.end - seg.start)
    if covered != list(trace.loss_mask):
        first = next(i for i, (c, m) in enumerate(zip(covered, trace.loss_mask, strict=True)) if c != m)
        raise ValueError(
            f"loss_mask and trained segments disagree at response position {first} "
            f"(mask {trace.loss_mask[first]}, {'in' if covered[first] else 'outside'} a trained segment)"
        )
    return trained


def with_messages(traces: Iterable[Trace], records: Iterable[Any]) -> None:
    """Keep each call's text with the traces it is in, as `metadata["messages"]` (record id -> the message the
    model wrote: content, reasoning, tool calls), so NeMo-RL's text checks read it from the trace alone."""
    messages = {r.id: r.message for r in records if r.message}
    for trace in traces:
        trace.metadata["messages"] = {rid: messages[rid] for rid in trace.record_ids if rid in messages}


# --- NeMo Gym ---------------------------------------------------------------------------------
def gym_output_items(trace: Trace, records: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """NeMo Gym `/run` response output items for one trace: the items of each trained call.

    Each call's text, reasoning and tool calls come from `records` (record id -> CompletionRecord), else
    from the trace's own `metadata["messages"]` (record id -> message, kept by the gateway node), so
    NeMo-RL's text-based checks and penalties see what the model said; without either, empty text.
    """
    check_trace(trace)
    kept = trace.metadata.get("messages") or {}
    items: list[dict[str, Any]] = []
    for seg in _trained_segments(trace):
        call = _call_items(seg.record_id, _message(records, seg.record_id) or kept.get(seg.record_id) or {})
        call[-1].update(  # Gym puts the token fields on the last item of each model call
            prompt_token_ids=list(trace.prompt_ids) + list(trace.response_ids[: seg.start]),
            generation_token_ids=list(trace.response_ids[seg.start : seg.end]),
            generation_log_probs=list(trace.response_logprobs[seg.start : seg.end]),
        )
        items += call
    if not any(item.get("generation_token_ids") for item in items):
        raise ValueError("trace has no trained tokens: NeMo-RL rejects a rollout without generation data")
    return items


def _message(records: Mapping[str, Any] | None, record_id: str) -> dict[str, Any]:
    record = (records or {}).get(record_id)
    message = record.get("message") if isinstance(record, dict) else getattr(record, "message", None)
    return message or {}


def _call_items(record_id: str, message: dict[str, Any]) -> list[dict[str, Any]]:
    """One model call as Responses items: reasoning, then text, then one item per tool call."""
    text = message.get("content")
    text = text if isinstance(text, str) else ""
    calls = message.get("tool_calls") or []
    items: list[dict[str, Any]] = []
    if message.get("reasoning"):
        items.append(
            {
                "id": f"rs_{record_id}",
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": message["reasoning"]}],
                "status": "completed",
            }
        )
    if text or not calls:
        items.append(
            {
                "id": f"msg_{record_id}",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        )
    for k, call in enumerate(calls):
        items.append(
            {
                "id": f"fc_{record_id}_{k}",
                "type": "function_call",
                "call_id": call.get("id") or f"call_{record_id}_{k}",
                "name": call.get("name", ""),
                "arguments": call.get("arguments", ""),
                "status": "completed",
            }
        )
    return items


def gym_response(
    trace: Trace,
    records: Mapping[str, Any] | None = None,
    model: str = "nemo_polar",
    *,
    response_id: str | None = None,
    created_at: float | None = None,
) -> dict[str, Any]:
    """A Responses-API response object whose `output` is `gym_output_items(trace, records)`.

    The id is derived from the trace's record ids unless given, so exports are reproducible.
    """
    length_stop = trace.metadata.get("finish_reason") == "length"
    return _response_envelope(
        gym_output_items(trace, records),
        response_id or "resp_" + hashlib.sha1("\n".join(trace.record_ids).encode()).hexdigest()[:24],
        model,
        created_at,
        length_stop,
    )


# The masked placeholder: one model call of one token. NeMo-RL raises on a rollout without any
# generation data *before* it looks at `mask_sample`, so a masked rollout still needs a trainable
# item. Its loss multiplier is 0 (no gradient), and its first prompt ([0]) matches no real task's, so
# NeMo-RL's prompt grouping keeps it out of every real group's GRPO baseline.
MASKED_PLACEHOLDER_IDS = (0,)


def gym_masked_response(model: str = "nemo_polar", *, response_id: str, created_at: float | None = None) -> dict:
    """A Responses object for a masked rollout (`mask_sample`): the placeholder call above, nothing trained."""
    item = {
        "id": f"msg_{response_id}_masked",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "", "annotations": []}],
        "prompt_token_ids": list(MASKED_PLACEHOLDER_IDS),
        "generation_token_ids": list(MASKED_PLACEHOLDER_IDS),
        "generation_log_probs": [0.0] * len(MASKED_PLACEHOLDER_IDS),
    }
    return _response_envelope([item], response_id, model, created_at, False)


def _response_envelope(
    output: list[dict[str, Any]], response_id: str, model: str, created_at: float | None, length_stop: bool
) -> dict[str, Any]:
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time() if created_at is None else created_at),
        "model": model,
        "status": "incomplete" if length_stop else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if length_stop else None,
        "error": None,
        "instructions": None,
        "metadata": {},
        "output": output,
        "parallel_tool_calls": True,
        "temperature": None,
        "top_p": None,
        "tool_choice": "auto",
        "tools": [],
        "usage": None,
    }


def gym_result(
    trace: Trace,
    records: Mapping[str, Any] | None = None,
    model: str = "nemo_polar",
    *,
    reward: float | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A `/run` result (Gym's verify response): `responses_create_params`, `response`, `reward`.

    `reward` defaults to the trace's; `extra` adds top-level fields (NeMo-RL logs numeric ones).
    """
    reward = trace.reward if reward is None else reward
    if reward is None:
        raise ValueError("a NeMo Gym result needs a reward: pass reward= or set trace.reward")
    return {
        "responses_create_params": {"input": []},
        "response": gym_response(trace, records, model),
        "reward": float(reward),
        **extra,
    }


# --- every chain ------------------------------------------------------------------------------
ENVELOPE_BUILDERS = {"prefix_tree": "prefix_merging", "per_request": "per_request"}


def training_traces(traces: list[Trace], rollout_id: str, builder: str = "prefix_tree") -> dict[str, Any]:
    """Every chain of a rollout in Gym's `training_traces` envelope (module docstring): each span owned once."""
    entries, owners = [], {}
    for index, trace in enumerate(traces):
        _trained_segments(trace)  # the mask is exactly the trained spans
        n = len(trace.prompt_ids)
        for seg in trace.segments:
            if seg.trained and owners.setdefault(seg.record_id, index) != index:
                raise ValueError(f"call {seg.record_id} is trained in traces {owners[seg.record_id]} and {index}")
        entries.append(
            {
                "trace_id": f"{rollout_id}:{trace.record_ids[-1] if trace.record_ids else index}",
                "model_call_ids": list(trace.record_ids),
                "token_ids": list(trace.prompt_ids) + list(trace.response_ids),
                "generation_logprobs": [0.0] * n + list(trace.response_logprobs),
                "loss_mask": [0] * n + list(trace.loss_mask),
                "sampled_spans": [
                    {"model_call_id": seg.record_id, "start": n + seg.start, "end": n + seg.end, "owned": seg.trained}
                    for seg in trace.segments
                ],
                "side_call": trace.metadata.get("side_call"),
            }
        )
    return {
        "schema_version": 1,
        "rollout_id": rollout_id,
        "builder": ENVELOPE_BUILDERS.get(builder, builder),
        "traces": entries,
    }


def envelope_trace(entry: Mapping[str, Any]) -> Trace:
    """One envelope entry back as a Trace (its prompt: the tokens before its first sampled span), so a trainer
    makes its rows exactly as it makes the primary chain's (`gym_output_items`)."""
    spans = entry["sampled_spans"]
    n = min((span["start"] for span in spans), default=len(entry["token_ids"]))
    segments = [
        Segment(record_id=span["model_call_id"], start=span["start"] - n, end=span["end"] - n, trained=span["owned"])
        for span in spans
    ]
    side = {"side_call": entry["side_call"]} if entry.get("side_call") else {}
    trace = Trace(
        prompt_ids=entry["token_ids"][:n],
        response_ids=entry["token_ids"][n:],
        loss_mask=entry["loss_mask"][n:],
        response_logprobs=entry["generation_logprobs"][n:],
        record_ids=entry["model_call_ids"],
        segments=segments,
        metadata=side,
    )
    check_trace(trace, entry.get("trace_id", "trace"))
    _trained_segments(trace)
    return trace


# --- JSONL ------------------------------------------------------------------------------------
def jsonl_row(trace: Trace, index: int, *, session_id: str | None = None, reward: float | None = None) -> dict:
    check_trace(trace, f"trace {index}")
    data = trace.model_dump(mode="json")
    data.update(session_id=session_id, trace_index=index, reward=trace.reward if reward is None else reward)
    return {key: data[key] for key in JSONL_KEYS}


def write_jsonl(
    result: BuildResult | Iterable[Trace],
    path: str | os.PathLike[str],
    *,
    session_id: str | None = None,
    reward: float | None = None,
) -> int:
    """Write one trace per line (schema in the module docstring); returns the number of lines.

    `reward`, when given, is written for every trace (the session's outcome reward).
    """
    traces = result.traces if isinstance(result, BuildResult) else list(result)
    lines = []
    for index, trace in enumerate(traces):
        row = jsonl_row(trace, index, session_id=session_id, reward=reward)
        try:
            lines.append(json.dumps(row, allow_nan=False, ensure_ascii=False, separators=(",", ":")))
        except ValueError as e:
            raise ValueError(f"trace {index}: NaN or infinite value, not writable as JSON ({e})") from None
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in lines)
    return len(lines)


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


def read_jsonl(path: str | os.PathLike[str]) -> list[Trace]:
    """The traces of a file written by `write_jsonl` (session_id and trace_index are not kept)."""
    traces = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                trace = Trace.model_validate(json.loads(line, parse_constant=_refuse_constant))
            except ValueError as e:  # json and pydantic errors both
                raise ValueError(f"{path}:{number}: not a trace: {e}") from None
            check_trace(trace, f"{path}:{number}")
            traces.append(trace)
    return traces
