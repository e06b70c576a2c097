"""Claude Code: Anthropic Messages; every model alias it may use pinned to the served model."""

from __future__ import annotations

from .base import Endpoint, Harness, Inside, Launch
from .versions import Pin


class ClaudeCode(Harness):
    name = "claude_code"
    # the newest releases need node >= 22; this is the newest that runs on node 20
    pin = Pin("@anthropic-ai/claude-code", "2.1.197", "npm")
    dialects = ("anthropic",)
    log_files = (".claude/projects/**/*.jsonl",)

    def launch(self, task: str, endpoint: Endpoint, inside: Inside, max_steps: int) -> Launch:
        argv = [
            str(inside.tools / "node/bin/claude"),  # a native binary: no node
            "-p",
            task,
            "--model",
            endpoint.model,
            "--output-format",
            "json",
            "--max-turns",
            str(max_steps),
            "--allowedTools",
            "Bash,Read,Edit,Write",
        ]
        m = endpoint.model
        env = self.base_env(inside) | {
            "ANTHROPIC_BASE_URL": endpoint.base_url,
            "ANTHROPIC_API_KEY": endpoint.api_key,
            "ANTHROPIC_MODEL": m,
            "ANTHROPIC_SMALL_FAST_MODEL": m,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": m,
            "ANTHROPIC_DEFAULT_SONNET_MODEL": m,
            "ANTHROPIC_DEFAULT_OPUS_MODEL": m,
            "CLAUDE_CODE_SUBAGENT_MODEL": m,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
        }
        return Launch(argv, env)
