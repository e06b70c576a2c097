"""The API dialects harnesses speak, by name. Adding one: a module, a line here, a test config."""

from __future__ import annotations

from collections.abc import Mapping

from .anthropic import Anthropic
from .base import Dialect, StreamRenderer
from .gemini import Gemini
from .openai_chat import OpenAIChat
from .openai_responses import OpenAIResponses

DIALECTS: dict[str, Dialect] = {d.name: d for d in (OpenAIChat(), OpenAIResponses(), Anthropic(), Gemini())}


def guess_dialect(path: str, headers: Mapping[str, str]) -> Dialect:
    """The dialect to answer an unroutable request in, from its path and headers."""
    if "anthropic-version" in headers or path.startswith("/v1/messages"):
        return DIALECTS["anthropic"]
    if path.startswith("/v1beta") or "x-goog-api-key" in headers:
        return DIALECTS["gemini"]
    return DIALECTS["openai_chat"]


__all__ = ["DIALECTS", "Dialect", "StreamRenderer", "guess_dialect"]
