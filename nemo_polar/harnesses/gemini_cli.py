"""Gemini CLI: Gemini generateContent (streaming chosen by path); needs an auth type in settings."""

from __future__ import annotations

from .base import Endpoint, Harness, Inside, Launch, dump
from .versions import Pin


class GeminiCli(Harness):
    name = "gemini_cli"
    pin = Pin("@google/gemini-cli", "0.61.0", "npm")
    dialects = ("gemini",)
    log_files = (".gemini/tmp/**/*.json", ".gemini/tmp/**/*.jsonl")

    def launch(self, task: str, endpoint: Endpoint, inside: Inside, max_steps: int) -> Launch:
        argv = [*inside.node("gemini"), "-p", task, "-m", endpoint.model, "--yolo"]
        settings = {
            "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
            "general": {"disableAutoUpdate": True},
            "privacy": {"usageStatisticsEnabled": False},
            "model": {"maxSessionTurns": max_steps},
            "telemetry": {"enabled": False},
        }
        env = self.base_env(inside) | {"GEMINI_API_KEY": endpoint.api_key, "GOOGLE_GEMINI_BASE_URL": endpoint.base_url}
        return Launch(argv, env, {".gemini/settings.json": dump(settings)})
