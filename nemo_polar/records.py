"""CompletionRecord: one LLM call as it really happened. The contract every part shares.

The proxy writes one per call, failed calls included; trace builders read them back. Field names
follow NeMo Gym's token capture where the meaning is the same (`prompt_token_ids`, ...).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

Status = Literal[
    "ok",
    "upstream_error",
    "timeout",
    "context_overflow",
    "invalid_upstream",
    "client_disconnected",
    "paused",
    "error",
]


class UpstreamInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    engine: str
    url: str
    model: str
    policy_version: str | None = None


class CompletionRecord(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    session_id: str
    seq: int = Field(description="order of arrival within the session, from 0")
    started_at: float
    finished_at: float
    first_token_at: float | None = None
    dialect: str
    stream: bool
    native_request: dict[str, Any] = Field(description="the harness's body, credentials removed")
    upstream_request: dict[str, Any] | None = None
    prompt_token_ids: list[int] = Field(default_factory=list)
    completion_token_ids: list[int] = Field(default_factory=list)
    completion_logprobs: list[float] = Field(default_factory=list, description="one per completion token")
    finish_reason: str | None = None
    message: dict[str, Any] | None = Field(default=None, description="content, reasoning, tool_calls")
    usage: dict[str, int] = Field(default_factory=dict)
    upstream: UpstreamInfo
    status: Status = "ok"
    error: str | None = None

    @property
    def trainable(self) -> bool:
        return (
            self.status == "ok"
            and bool(self.prompt_token_ids)
            and len(self.completion_logprobs) == len(self.completion_token_ids)
        )


class Session(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    api_key: str = Field("", description="the key the harness uses; stores keep only its hash (empty when read back)")
    created_at: float
    metadata: dict[str, Any] = Field(default_factory=dict)
    upstream_url: str | None = Field(None, description="this session's own inference server (a task's)")
    upstream_model: str | None = Field(None, description="the name that server serves the policy under")
    max_tokens: int | None = Field(None, description="cap on each call's sampled tokens (the task's)")
    max_calls: int | None = Field(None, description="the session's budget of model calls (the task's)")
    max_sampled: int | None = Field(None, description="the session's budget of sampled tokens, over every call")


class RecordStore(Protocol):
    """Where records and sessions live. `add_record` must not block the caller."""

    def add_session(self, session: Session) -> None: ...
    def session_by_key(self, api_key: str) -> Session | None: ...
    def close_session(self, session_id: str, at: float | None = None) -> None: ...
    def sessions(self) -> list[Session]: ...
    def add_record(self, record: CompletionRecord, on_commit: Callable[[], None] | None = None) -> None: ...
    def durable(self, record: CompletionRecord) -> asyncio.Future[None]: ...
    def records(self, session_id: str) -> list[CompletionRecord]: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...
