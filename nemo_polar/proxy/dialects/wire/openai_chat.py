"""OpenAI Chat Completions request, the fields we read, in the API reference's order.

Unknown fields are allowed (harnesses send many) and listed by the dialect in a debug log.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr


class _Wire(BaseModel):
    model_config = ConfigDict(extra="allow")


class FunctionCall(_Wire):
    name: str
    arguments: str = ""


class ToolCall(_Wire):
    id: str
    type: str = "function"
    function: FunctionCall


class ChatMessage(_Wire):
    _canonical: Any = PrivateAttr(default=None)  # what it converts to, once (dialects.base.converted)
    _run: Any = PrivateAttr(
        default=None
    )  # on a history's first item: its last call's messages (dialects.base.converted_all)
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    # not in the spec: what vLLM and others use for earlier reasoning
    reasoning_content: str | None = None
    reasoning: str | None = None


class FunctionDef(_Wire):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ToolDef(_Wire):
    type: str = "function"
    function: FunctionDef


class ChatCompletionRequest(_Wire):
    messages: list[ChatMessage] = Field(min_length=1)
    model: str
    frequency_penalty: float | None = None
    max_completion_tokens: int | None = Field(default=None, ge=1)
    max_tokens: int | None = Field(default=None, ge=1)
    n: int | None = Field(default=None, ge=1)
    presence_penalty: float | None = None
    reasoning_effort: str | None = None
    response_format: dict[str, Any] | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool | None = False
    stream_options: dict[str, Any] | None = None
    temperature: float | None = None
    tool_choice: str | dict[str, Any] | None = None
    tools: list[ToolDef] | None = None
    top_p: float | None = None
    # --- not in the spec, accepted by vLLM and SGLang ---
    top_k: int | None = None
    chat_template_kwargs: dict[str, Any] | None = None
