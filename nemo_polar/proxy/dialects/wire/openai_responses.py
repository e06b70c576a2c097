"""OpenAI Responses request (`POST /v1/responses`), the fields we read, in the API reference's order.

Input items and tools are told apart by `type` (a message item may omit it). An item or tool type
we do not model validates as `OtherItem` / `OtherTool` and the dialect decides what to do with it,
so a new type from a harness is a log line, not a 400. Unknown fields are allowed everywhere.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag


class _Wire(BaseModel):
    model_config = ConfigDict(extra="allow")


def _kind(known: frozenset[str], default: str | None):
    """A discriminator: the value's `type` when we model it, else "other"."""

    def pick(v: Any) -> str:
        t = v.get("type", default) if isinstance(v, dict) else getattr(v, "type", default)
        return t if t in known else "other"

    return Discriminator(pick)


# --- content parts ---------------------------------------------------------------------------
class InputText(_Wire):
    type: Literal["input_text"]
    text: str


class OutputText(_Wire):
    type: Literal["output_text"]
    text: str
    annotations: list[Any] | None = None


class Refusal(_Wire):
    type: Literal["refusal"]
    refusal: str


class InputImage(_Wire):
    type: Literal["input_image"]
    detail: str | None = None
    file_id: str | None = None
    image_url: str | None = None


class InputFile(_Wire):
    type: Literal["input_file"]


ContentPart = Annotated[InputText | OutputText | Refusal | InputImage | InputFile, Field(discriminator="type")]


def _text_as_part(v: Any) -> Any:
    # a plain string means one text part; folding it here keeps error locations free of union noise
    return [{"type": "input_text", "text": v}] if isinstance(v, str) else v


Content = Annotated[list[ContentPart], BeforeValidator(_text_as_part)]


# --- input items -----------------------------------------------------------------------------
class MessageItem(_Wire):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: Content
    id: str | None = None
    status: str | None = None


class SummaryText(_Wire):
    type: Literal["summary_text"]
    text: str


class ReasoningText(_Wire):
    type: Literal["reasoning_text"]
    text: str


class ReasoningItem(_Wire):
    type: Literal["reasoning"]
    id: str | None = None  # Codex drops it when replaying
    summary: list[SummaryText] = Field(default_factory=list)
    content: list[ReasoningText] | None = None
    encrypted_content: str | None = None
    status: str | None = None


class FunctionCallItem(_Wire):
    type: Literal["function_call"]
    arguments: str
    call_id: str
    name: str
    id: str | None = None
    namespace: str | None = None  # set when the tool was declared inside a `namespace` tool
    status: str | None = None


class FunctionCallOutputItem(_Wire):
    type: Literal["function_call_output"]
    call_id: str
    output: Content
    id: str | None = None
    status: str | None = None


class OtherItem(_Wire):
    """Any item type not modelled above (web_search_call, local_shell_call, compaction, ...)."""

    type: str


_ITEMS = frozenset({"message", "reasoning", "function_call", "function_call_output"})
InputItem = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[ReasoningItem, Tag("reasoning")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
    | Annotated[OtherItem, Tag("other")],
    _kind(_ITEMS, "message"),
]


def _text_as_message(v: Any) -> Any:
    # a plain string input is one user message (the API's own definition)
    return [{"type": "message", "role": "user", "content": v}] if isinstance(v, str) else v


Input = Annotated[list[InputItem], BeforeValidator(_text_as_message)]


# --- tools -----------------------------------------------------------------------------------
class FunctionTool(_Wire):
    type: Literal["function"]
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class OtherTool(_Wire):
    """Server-side tools (web_search, file_search, ...), custom tools, anything not modelled."""

    type: str


NamespaceMember = Annotated[
    Annotated[FunctionTool, Tag("function")] | Annotated[OtherTool, Tag("other")],
    _kind(frozenset({"function"}), None),
]


class NamespaceTool(_Wire):
    """A group of tools under one name (Codex's `multi_agent_v1`); calls come back with `namespace`."""

    type: Literal["namespace"]
    name: str
    description: str | None = None
    tools: list[NamespaceMember]


ToolDef = Annotated[
    Annotated[FunctionTool, Tag("function")]
    | Annotated[NamespaceTool, Tag("namespace")]
    | Annotated[OtherTool, Tag("other")],
    _kind(frozenset({"function", "namespace"}), None),
]


# --- the request -----------------------------------------------------------------------------
class ReasoningConfig(_Wire):
    effort: str | None = None  # none | minimal | low | medium | high | xhigh
    summary: str | None = None  # auto | concise | detailed


class TextFormat(_Wire):
    type: Literal["text", "json_schema", "json_object"]
    name: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    description: str | None = None
    strict: bool | None = None


class TextConfig(_Wire):
    format: TextFormat | None = None
    verbosity: str | None = None


class ResponsesRequest(_Wire):
    background: bool | None = None
    conversation: str | dict[str, Any] | None = None
    include: list[str] | None = None
    input: Input | None = None
    instructions: str | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    max_tool_calls: int | None = None
    metadata: dict[str, Any] | None = None
    model: str
    parallel_tool_calls: bool | None = None
    previous_response_id: str | None = None
    prompt: dict[str, Any] | None = None
    prompt_cache_key: str | None = None
    reasoning: ReasoningConfig | None = None
    safety_identifier: str | None = None
    service_tier: str | None = None
    store: bool | None = None
    stream: bool | None = False
    stream_options: dict[str, Any] | None = None
    temperature: float | None = None
    text: TextConfig | None = None
    tool_choice: str | dict[str, Any] | None = None
    tools: list[ToolDef] | None = None
    top_logprobs: int | None = None
    top_p: float | None = None
    truncation: str | None = None
    user: str | None = None
    # --- not in the spec: what Codex sends ---
    client_metadata: dict[str, Any] | None = None
