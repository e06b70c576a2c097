"""Pi: one harness, every wire API it speaks, chosen by the provider entry in its models.json."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from .base import Endpoint, Harness, HarnessSettings, Inside, Launch, dump
from .versions import Pin

API = {
    "openai_chat": "openai-completions",
    "openai_responses": "openai-responses",
    "anthropic": "anthropic-messages",
    "gemini": "google-generative-ai",
}


class PiSettings(HarnessSettings):
    dialect: Literal["openai_chat", "openai_responses", "anthropic", "gemini"] = Field(
        "openai_chat", description="which wire API Pi speaks to the proxy"
    )

    @field_validator("dialect", mode="before")
    @classmethod
    def _spoken(cls, dialect: object) -> object:
        if dialect not in API:
            raise ValueError(f"pi speaks {sorted(API)}, not {dialect!r}")
        return dialect


class Pi(Harness):
    name = "pi"
    stops_at_max_steps = False  # max_steps is enforced by the proxy, as a budget of model calls
    pin = Pin("@mariozechner/pi-coding-agent", "0.73.1", "npm")
    dialects = tuple(API)
    Settings = PiSettings
    settings: PiSettings

    @property
    def dialect(self) -> str:
        return self.settings.dialect

    def launch(self, task: str, endpoint: Endpoint, inside: Inside, max_steps: int) -> Launch:
        base = endpoint.base_url + ("/v1" if self.dialect.startswith("openai") else "")
        if self.dialect == "gemini":
            base = endpoint.base_url + "/v1beta"
        provider = {
            "baseUrl": base,
            "api": API[self.dialect],
            "apiKey": endpoint.api_key,
            "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
            "models": [{"id": endpoint.model, "maxTokens": 256, "contextWindow": 32768}],
        }
        argv = [
            *inside.node("pi"),
            "-p",
            "--no-session",
            "--offline",
            "--provider",
            "polar",
            "--model",
            endpoint.model,
            task,
        ]
        files = {".pi/agent/models.json": dump({"providers": {"polar": provider}})}
        return Launch(argv, self.base_env(inside), files)
