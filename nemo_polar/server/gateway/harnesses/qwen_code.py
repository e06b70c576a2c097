"""Qwen Code: OpenAI Chat Completions, streaming."""

from __future__ import annotations

from pathlib import Path

from .base import TOOLS, Endpoint, Harness, Launch, dump


class QwenCode(Harness):
    name = "qwen_code"
    dialects = ("openai_chat",)
    log_files = (".qwen/tmp/**/*.json", ".qwen/tmp/**/*.jsonl")

    def launch(self, task: str, endpoint: Endpoint, home: Path, workdir: Path, max_steps: int) -> Launch:
        argv = [
            str(TOOLS / "node/bin/qwen"),
            "--auth-type",
            "openai",
            "--openai-api-key",
            endpoint.api_key,
            "--openai-base-url",
            f"{endpoint.base_url}/v1",
            "-m",
            endpoint.model,
            "--yolo",
            "--max-session-turns",
            str(max_steps),
            "-p",
            task,
        ]
        settings = {
            "general": {"disableAutoUpdate": True},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
        }
        return Launch(argv, self.base_env(home), {".qwen/settings.json": dump(settings)})
