"""OpenAIResponses dialect: to be written (see base.py for the contract, openai_chat.py for an example)."""

from __future__ import annotations

from typing import Any

from ...chat import ChatRequest, Completion
from ...errors import PolarError, RequestInvalid
from .base import Dialect, StreamRenderer
from .openai_chat import openai_error


class OpenAIResponses(Dialect):
    name = "openai_responses"
    routes = [("/v1/responses", ["POST"])]

    def parse_request(self, body: Any, path_params: dict[str, str], query: dict[str, str]) -> ChatRequest:
        raise RequestInvalid("openai_responses is not implemented yet")

    def render_response(self, completion: Completion, request: ChatRequest) -> dict[str, Any]:
        raise NotImplementedError

    def stream_renderer(self, request: ChatRequest) -> StreamRenderer:
        raise NotImplementedError

    def render_error(self, err: PolarError) -> dict[str, Any]:
        return openai_error(err)
