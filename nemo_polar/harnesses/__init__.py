"""Harness adapters: how each agent CLI is launched, unchanged, against the proxy. One module each,
named in `HARNESSES`; a task may also name its own `Harness` subclass as `"package.module:Class"`."""

from ..plugins import Registry
from .base import Endpoint, Harness, HarnessSettings, Inside, Launch

HARNESSES: Registry[Harness] = Registry(
    "harness",
    Harness,
    {
        "codex": f"{__name__}.codex:Codex",
        "claude_code": f"{__name__}.claude_code:ClaudeCode",
        "qwen_code": f"{__name__}.qwen_code:QwenCode",
        "gemini_cli": f"{__name__}.gemini_cli:GeminiCli",
        "pi": f"{__name__}.pi:Pi",
        "mini_swe_agent": f"{__name__}.mini_swe_agent:MiniSweAgent",
        "openhands": f"{__name__}.openhands:OpenHands",
        "shell": f"{__name__}.shell:Shell",
    },
)

__all__ = ["HARNESSES", "Endpoint", "Harness", "HarnessSettings", "Inside", "Launch"]
