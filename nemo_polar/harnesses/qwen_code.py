"""Qwen Code: OpenAI Chat Completions, streaming."""

from __future__ import annotations

from .base import Endpoint, Harness, Inside, Launch, dump
from .versions import Pin


class QwenCode(Harness):
    name = "qwen_code"
    # the newest releases need node >= 22; this is the newest that runs on node 20
    pin = Pin("@qwen-code/qwen-code", "0.15.10", "npm")
    dialects = ("openai_chat",)
    # after the agent's first answer it asks the model, beside the agent, what to remember of the session
    side_calls = {"memory": "managed memory extraction subagent"}
    log_files = (".qwen/tmp/**/*.json", ".qwen/tmp/**/*.jsonl")

    def launch(self, task: str, endpoint: Endpoint, inside: Inside, max_steps: int) -> Launch:
        argv = [
            *inside.node("qwen"),
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
        return Launch(argv, self.base_env(inside), {".qwen/settings.json": dump(settings)})
