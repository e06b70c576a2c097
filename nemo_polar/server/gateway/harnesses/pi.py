"""Pi: one harness, four wire APIs, chosen by the provider entry in its models.json."""

from __future__ import annotations

from pathlib import Path

from .base import TOOLS, Endpoint, Harness, Launch, dump

API = {
    "openai_chat": "openai-completions",
    "openai_responses": "openai-responses",
    "anthropic": "anthropic-messages",
    "gemini": "google-generative-ai",
}


class Pi(Harness):
    name = "pi"
    dialects = tuple(API)

    def __init__(self, dialect: str = "openai_chat"):
        if dialect not in API:
            raise ValueError(f"pi speaks {sorted(API)}, not {dialect!r}")
        self.dialect = dialect

    def launch(self, task: str, endpoint: Endpoint, home: Path, workdir: Path, max_steps: int) -> Launch:
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
            str(TOOLS / "node/bin/pi"),
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
        return Launch(argv, self.base_env(home), files)
