"""Anthropic Messages request, the fields we read, in the API reference's order.

Content blocks are told apart by `type`; a type we do not model (documents, server tool results,
search results, ...) validates as `OtherBlock` and the dialect decides what to do with it, so a new
block type from a harness is a log line, not a 400. Unknown fields are allowed everywhere.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, PrivateAttr, Tag


class _Wire(BaseModel):
    model_config = ConfigDict(extra="allow")


class TextBlock(_Wire):
    type: Literal["text"]
    text: str
    cache_control: dict[str, Any] | None = None
    citations: list[dict[str, Any]] | None = None


class ImageSource(_Wire):
    type: Literal["base64", "url", "file"]
    media_type: str | None = None  # base64
    data: str | None = None  # base64
    url: str | None = None  # url
    file_id: str | None = None  # file


class ImageBlock(_Wire):
    type: Literal["image"]
    source: ImageSource
    cache_control: dict[str, Any] | None = None


class ToolUseBlock(_Wire):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]
    cache_control: dict[str, Any] | None = None


class ThinkingBlock(_Wire):
    type: Literal["thinking"]
    thinking: str
    signature: str | None = None  # required by the API; ours are never verified, so a missing one is let through


class RedactedThinkingBlock(_Wire):
    type: Literal["redacted_thinking"]
    data: str = ""


class OtherBlock(_Wire):
    """Any block type not modelled above."""

    type: str


def _block_tag(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if kind in _BLOCK_TAGS else "other"


_BLOCK_TAGS = {"text", "image", "tool_use", "tool_result", "thinking", "redacted_thinking"}

# a block inside a tool_result: text or image (anything else is kept as OtherBlock)
ResultBlock = Annotated[
    Annotated[TextBlock, Tag("text")] | Annotated[ImageBlock, Tag("image")] | Annotated[OtherBlock, Tag("other")],
    Discriminator(lambda v: t if (t := _block_tag(v)) in ("text", "image") else "other"),
]


def _text_or_blocks(block: Any) -> Any:
    """`str | list[block]`, with "text" / "blocks" in error locations instead of pydantic's type names."""
    return Annotated[
        Annotated[str, Tag("text")] | Annotated[list[block], Tag("blocks")],
        Discriminator(lambda v: "text" if isinstance(v, str) else "blocks"),
    ]


ResultContent = _text_or_blocks(ResultBlock)


class ToolResultBlock(_Wire):
    type: Literal["tool_result"]
    tool_use_id: str
    content: ResultContent | None = None
    is_error: bool | None = None
    cache_control: dict[str, Any] | None = None


ContentBlock = Annotated[
    Annotated[TextBlock, Tag("text")]
    | Annotated[ImageBlock, Tag("image")]
    | Annotated[ToolUseBlock, Tag("tool_use")]
    | Annotated[ToolResultBlock, Tag("tool_result")]
    | Annotated[ThinkingBlock, Tag("thinking")]
    | Annotated[RedactedThinkingBlock, Tag("redacted_thinking")]
    | Annotated[OtherBlock, Tag("other")],
    Discriminator(_block_tag),
]


MessageContent = _text_or_blocks(ContentBlock)
SystemContent = _text_or_blocks(TextBlock)


class MessageParam(_Wire):
    _canonical: Any = PrivateAttr(default=None)  # what it converts to, once (dialects.base.converted)
    # "system" is not in the public spec: Claude Code's mid-conversation-system beta puts it here
    role: Literal["user", "assistant", "system"]
    content: MessageContent


class ToolDef(_Wire):
    name: str
    description: str | None = None
    input_schema: dict[str, Any] | None = None  # absent on server tools (web_search_20250305, ...)
    type: str | None = None  # "custom" or a server tool's versioned type
    cache_control: dict[str, Any] | None = None


class ToolChoice(_Wire):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class ThinkingConfig(_Wire):
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = None


class MessagesRequest(_Wire):
    max_tokens: int = Field(ge=1)
    messages: list[MessageParam] = Field(min_length=1)
    model: str
    container: Any = None
    context_management: dict[str, Any] | None = None
    mcp_servers: list[dict[str, Any]] | None = None
    metadata: dict[str, Any] | None = None
    output_config: dict[str, Any] | None = None
    service_tier: str | None = None
    stop_sequences: list[str] | None = None
    stream: bool | None = False
    system: SystemContent | None = None
    temperature: float | None = None
    thinking: ThinkingConfig | None = None
    tool_choice: ToolChoice | None = None
    tools: list[ToolDef] | None = None
    top_k: int | None = None
    top_p: float | None = None
