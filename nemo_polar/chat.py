"""The canonical chat form every dialect translates through (dialect -> canonical -> dialect).

It is deliberately close to OpenAI Chat Completions, because that is what every backend speaks,
but carries only what the project understands; anything a dialect cannot map is kept in
`ChatRequest.extra` for the backend or dropped with a log line, never silently mis-mapped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, exactly as sampled or as the harness sent it back


@dataclass(slots=True)
class Message:
    role: str  # system | user | assistant | tool
    content: str | list[dict[str, Any]] = ""  # text, or OpenAI-style parts (text, image_url)
    reasoning: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None
    # its Chat Completions form, built once (backends.base.message_body): a history's unchanged messages
    # are the same objects call after call, and so are the upstream's
    chat_form: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    chat_json: Any = field(default=None, repr=False, compare=False)  # that form's JSON (an orjson.Fragment)

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(p.get("text", "") for p in self.content if p.get("type") == "text")


@dataclass(slots=True)
class Tool:
    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})


@dataclass(slots=True)
class ChatRequest:
    model: str
    messages: list[Message]
    tools: list[Tool] = field(default_factory=list)
    tool_choice: str | dict[str, Any] | None = None  # auto | none | required | {"name": ...}
    stream: bool = False
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    thinking: bool | None = None  # the harness asked for reasoning (None: it did not say)
    response_format: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # passed to the upstream body as is
    hints: dict[str, Any] = field(default_factory=dict)  # what the dialect needs back when rendering


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0


@dataclass(slots=True)
class Completion:
    """One assistant turn as the inference server produced it, tokens included."""

    text: str = ""
    reasoning: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str = "stop"  # stop | length | tool_calls | content_filter
    prompt_token_ids: list[int] = field(default_factory=list)
    completion_token_ids: list[int] = field(default_factory=list)
    completion_logprobs: list[float] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    id: str = ""
    policy_version: str | None = None  # the weights that sampled it, when the server says (SGLang's weight_version)

    def message_dict(self) -> dict[str, Any]:
        return {
            "content": self.text,
            "reasoning": self.reasoning,
            "tool_calls": [{"id": t.id, "name": t.name, "arguments": t.arguments} for t in self.tool_calls],
        }


@dataclass(slots=True)
class ToolCallDelta:
    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(slots=True)
class Delta:
    """A piece of a streamed turn, as it arrives from the upstream."""

    text: str = ""
    reasoning: str = ""
    tool_call: ToolCallDelta | None = None
