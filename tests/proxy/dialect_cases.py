"""One minimal request per dialect, and how each dialect shapes an error: the shared fixtures of
the cross-dialect tests (faults, bad input, real streaming)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Case:
    dialect: str
    path: Callable[[bool], str]
    key_header: str
    body: Callable[[str, bool], dict[str, Any]]
    error_message: Callable[[dict[str, Any]], str]  # the message inside this dialect's error body

    def headers(self, key: str) -> dict[str, str]:
        value = f"Bearer {key}" if self.key_header == "authorization" else key
        extra = {"anthropic-version": "2023-06-01"} if self.dialect == "anthropic" else {}
        return {self.key_header: value, "content-type": "application/json"} | extra


def _openai_error(body: dict[str, Any]) -> str:
    return body["error"]["message"]


CASES = [
    Case(
        "openai_chat",
        lambda s: "/v1/chat/completions",
        "authorization",
        lambda text, s: {"model": "m", "messages": [{"role": "user", "content": text}], "stream": s, "max_tokens": 8},
        _openai_error,
    ),
    Case(
        "openai_responses",
        lambda s: "/v1/responses",
        "authorization",
        lambda text, s: {
            "model": "m",
            "input": [{"role": "user", "content": text}],
            "stream": s,
            "max_output_tokens": 8,
        },
        _openai_error,
    ),
    Case(
        "anthropic",
        lambda s: "/v1/messages?beta=true",
        "x-api-key",
        lambda text, s: {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": text}], "stream": s},
        lambda b: b["error"]["message"] if b.get("type") == "error" else "",
    ),
    Case(
        "gemini",
        lambda s: "/v1beta/models/m:" + ("streamGenerateContent?alt=sse" if s else "generateContent"),
        "x-goog-api-key",
        lambda text, s: {
            "contents": [{"role": "user", "parts": [{"text": text}]}],
            "generationConfig": {"maxOutputTokens": 8},
        },
        lambda b: b["error"]["message"],
    ),
]
IDS = [c.dialect for c in CASES]
