"""Gemini `GenerateContentRequest`, the fields we read, in the API reference's order.

Google's REST front end accepts proto field names in camelCase and in snake_case (its own curl
examples send `system_instruction`, `generation_config`), so every field here takes both: the
attribute is snake_case, the alias camelCase. Unknown fields are allowed everywhere; the dialect
decides what to drop and logs it. JSON `Struct` values (`args`, `response`, schemas) stay dicts.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class _Wire(BaseModel):
    model_config = ConfigDict(extra="allow", alias_generator=to_camel, populate_by_name=True)


class Blob(_Wire):
    mime_type: str
    data: str  # base64


class FunctionCall(_Wire):
    id: str | None = None
    name: str
    args: dict[str, Any] | None = None


class FunctionResponse(_Wire):
    id: str | None = None
    name: str
    response: dict[str, Any] = Field(default_factory=dict)
    parts: list[Part] | None = None  # multimodal function responses (inlineData)


class FileData(_Wire):
    mime_type: str | None = None
    file_uri: str


class Part(_Wire):
    thought: bool | None = None
    thought_signature: str | None = None
    # one of the following data fields
    text: str | None = None
    inline_data: Blob | None = None
    function_call: FunctionCall | None = None
    function_response: FunctionResponse | None = None
    file_data: FileData | None = None
    executable_code: dict[str, Any] | None = None
    code_execution_result: dict[str, Any] | None = None


class Content(_Wire):
    parts: list[Part] = Field(default_factory=list)
    # "function" is what the older API used for turns holding function responses
    role: Literal["user", "model", "function"] | None = None


class FunctionDeclaration(_Wire):
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None  # OpenAPI-style Schema, types in upper case
    parameters_json_schema: dict[str, Any] | None = None  # plain JSON Schema


class Tool(_Wire):
    function_declarations: list[FunctionDeclaration] | None = None
    # googleSearch, codeExecution, urlContext, ...: allowed as extra fields, dropped by the dialect


class FunctionCallingConfig(_Wire):
    mode: str | None = None  # AUTO | ANY | NONE | VALIDATED
    allowed_function_names: list[str] | None = None


class ToolConfig(_Wire):
    function_calling_config: FunctionCallingConfig | None = None


class ThinkingConfig(_Wire):
    include_thoughts: bool | None = None
    thinking_budget: int | None = None
    thinking_level: str | None = None


class GenerationConfig(_Wire):
    stop_sequences: list[str] | None = None
    response_mime_type: str | None = None
    response_schema: dict[str, Any] | None = None
    response_json_schema: dict[str, Any] | None = None
    candidate_count: int | None = Field(default=None, ge=1)
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    thinking_config: ThinkingConfig | None = None


class GenerateContentRequest(_Wire):
    contents: list[Content] = Field(min_length=1)
    tools: list[Tool] | None = None
    tool_config: ToolConfig | None = None
    safety_settings: list[dict[str, Any]] | None = None  # accepted, not applied
    system_instruction: Content | str | None = None  # a string is what SDK configs allow
    generation_config: GenerationConfig | None = None
    cached_content: str | None = None  # accepted, not applied


FunctionResponse.model_rebuild()
