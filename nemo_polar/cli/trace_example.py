"""The annotated trace of docs/traces.md, written by `polar docs` between two markers of that page. It is made
from a session the proxy recorded against the tiny vLLM (`SESSION`: its records as `polar export` writes them),
through the steps a gateway node takes when a session ends (`build`, `with_messages`, the JSONL row), so the
page shows a line as a run writes it today: change the builder or the schema and the page follows."""

from __future__ import annotations

import json
from typing import Any

from ..paths import ROOT
from ..records import CompletionRecord
from ..traces import build
from ..traces.export import jsonl_row, with_messages
from .markdown import code, table

SESSION = ROOT / "tests" / "fixtures" / "traces" / "recorded_session.jsonl"
BEGIN = "<!-- the trace below is written by `polar docs` from tests/fixtures/traces/recorded_session.jsonl -->"
END = "<!-- end of what `polar docs` writes -->"


def records() -> list[CompletionRecord]:
    return [CompletionRecord.model_validate_json(line) for line in SESSION.read_text().splitlines() if line]


def line(recorded: list[CompletionRecord]) -> dict[str, Any]:
    """The session's first trace as a gateway node writes it to `traces/<session_id>.jsonl`."""
    built = build(recorded, "prefix_tree")
    with_messages(built.traces, recorded)
    return jsonl_row(built.traces[0], 0, session_id=recorded[0].session_id)


def block(recorded: list[CompletionRecord]) -> list[str]:
    row = line(recorded)
    shown = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v, separators=(', ', ': '))}" for k, v in row.items())
    lines = [
        f"A session of {len(recorded)} model calls (an agent script: a system and a user turn, the model's answer, "
        "one more user turn, its answer), recorded by `polar proxy` in front of the tiny model (`polar vllm "
        "start`), and its trace as a gateway node writes it to `traces/<session_id>.jsonl` (`polar traces` "
        "writes the same without `metadata.messages`). The file holds it on one line; here, one key a line:",
        "",
        "```json",
        "{\n" + shown + "\n}",
        "```",
        "",
    ]
    return lines + table(["key", "here", "what it is"], annotations(row))


def annotations(row: dict[str, Any]) -> list[list[str]]:
    segments, response, mask = row["segments"], row["response_ids"], row["loss_mask"]
    spans, last = [], 0
    for i, s in enumerate(segments, 1):
        if s["start"] > last:
            spans.append(f"{last}–{s['start']}: the turns and template tokens call {i}'s prompt added")
        spans.append(f"{s['start']}–{s['end']}: call {i}'s sampled ids")
        last = s["end"]
    sampled = [p for s in segments for p in row["response_logprobs"][s["start"] : s["end"]]]
    texts = [json.dumps(m.get("content")) for m in row["metadata"].get("messages", {}).values()]
    ranges = ", ".join(f"{s['start']}–{s['end']} ({'trained' if s['trained'] else 'not trained'})" for s in segments)
    meta = ", ".join(code(k) for k in row["metadata"])
    return [
        [code("session_id"), code(row["session_id"]), "the proxy session the trace was built from"],
        [code("trace_index"), code(str(row["trace_index"])), "its place among the session's traces, from 0"],
        [
            code("prompt_ids"),
            f"{len(row['prompt_ids'])} ids",
            "the first call's prompt as the chat template rendered it: context, never trained",
        ],
        [
            code("response_ids"),
            f"{len(response)} ids",
            "everything after the prompt, each call's prompt extending the last call's prompt and sample: "
            + "; ".join(spans),
        ],
        [
            code("loss_mask"),
            f"{sum(mask)} of {len(mask)} are 1",
            "1 on a sampled id trained in this trace, 0 on the tokens between (user turns, tool output, template)",
        ],
        [
            code("response_logprobs"),
            f"from {max(sampled):.2f} to {min(sampled):.2f} where sampled" if sampled else "–",
            "the server's logprob of each sampled id, 0.0 where the mask is 0",
        ],
        [
            code("record_ids"),
            f"{len(row['record_ids'])} records",
            "the `CompletionRecord`s of the chain in order; `polar export` shows them whole",
        ],
        [
            code("segments"),
            ranges,
            "each call's sampled span in `response_ids`; not trained where another trace of the session trains it",
        ],
        [
            code("reward"),
            code(json.dumps(row["reward"])),
            "a gateway node writes the traces before grading: the reward is in the session's result, beside "
            "`traces_path`; `write_jsonl(reward=...)` puts it here",
        ],
        [
            code("metadata"),
            meta,
            f"the last call's finish_reason, each call's seq, the drift repaired on the way (repairs), and each "
            f"call's text (messages: {', '.join(texts)})",
        ],
    ]


def page(text: str, recorded: list[CompletionRecord] | None = None) -> str:
    """`text` (docs/traces.md) with what lies between the markers written anew."""
    head, begin, rest = text.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise ValueError(f"docs/traces.md lacks the markers of the trace example: {BEGIN} ... {END}")
    return "\n".join([head + BEGIN, "", *block(records() if recorded is None else recorded), END]) + tail
