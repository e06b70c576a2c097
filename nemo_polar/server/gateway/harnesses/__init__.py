"""Harness adapters by name."""

from .base import Endpoint, Harness, Launch
from .claude_code import ClaudeCode
from .codex import Codex
from .gemini_cli import GeminiCli
from .mini_swe_agent import MiniSweAgent
from .openhands import OpenHands
from .pi import Pi
from .qwen_code import QwenCode
from .shell import Shell

HARNESSES: dict[str, type[Harness]] = {
    h.name: h for h in (Codex, ClaudeCode, QwenCode, GeminiCli, Pi, MiniSweAgent, OpenHands, Shell)
}

__all__ = ["HARNESSES", "Endpoint", "Harness", "Launch"]
