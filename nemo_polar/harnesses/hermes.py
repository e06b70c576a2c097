"""Hermes Agent (Nous Research): OpenAI Chat Completions, streaming (but its summary call at its step limit).

Run as `hermes chat -q TASK -Q` (one query, quiet, then exit) with `--yolo` (no approval prompts). Its configuration
is `~/.hermes/config.yaml` in the session's HOME: a `custom` provider at the proxy with the session's key, the served
model for every auxiliary task, and everything that would fetch, install or call beside the agent off: the tirith
scanner download, the model catalog, LSP, the update check (its cache, written fresh), memory and skill nudges
(background review calls), the curator, title generation and context compression. Its tools are the terminal and
file toolsets (the browser set would npx-install a browser, the web set needs keys).
"""

from __future__ import annotations

import json

from pydantic import Field

from .base import Endpoint, Harness, HarnessSettings, Inside, Launch
from .versions import Pin

CONFIG = ".hermes/config.yaml"  # under HOME (its HERMES_HOME is ~/.hermes)
# the auxiliary tasks it may run on a model of their own: each on the served one, should one be turned on
AUXILIARY = ("vision", "web_extract", "compression", "approval", "mcp", "skills_hub", "curator", "background_review")
NEVER = 4102444800  # 2100-01-01: its update check's cache never goes stale, so it never asks PyPI


class HermesSettings(HarnessSettings):
    toolsets: list[str] = Field(
        default_factory=lambda: ["terminal", "file"], description="its toolsets (`-t`): the agent's tools"
    )
    max_tokens: int = Field(4096, gt=0, description="the `max_tokens` it sends (its own default is 65536)")
    # it refuses a model whose context it takes for less than 64K tokens
    context: int = Field(65536, ge=65536, description="the context window it assumes for the served model")


class Hermes(Harness):
    name = "hermes"
    pin = Pin("hermes-agent", "0.19.0", "pip", "hermes")
    dialects = ("openai_chat",)
    Settings = HermesSettings
    log_files = (".hermes/logs/*.log", ".hermes/sessions/**/*", ".hermes/state.db")
    settings: HermesSettings

    def launch(self, task: str, endpoint: Endpoint, inside: Inside, max_steps: int) -> Launch:
        s = self.settings
        argv = [
            *inside.python("hermes"),  # its own Python 3.11 in the toolchain
            "-m",
            "hermes_cli.main",
            "chat",
            "-Q",
            "--yolo",
            "-t",
            ",".join(s.toolsets),
            # at its limit it sends one more call (a summary without tools): max_steps calls in all
            "--max-turns",
            str(max(1, max_steps - 1)),
            "-q",
            task,
        ]
        return Launch(argv, self.base_env(inside) | {"PYTHONUNBUFFERED": "1"}, self.files(endpoint))

    def files(self, endpoint: Endpoint) -> dict[str, str]:
        s = self.settings
        url = f"{endpoint.base_url}/v1"
        served = {"provider": "custom", "model": endpoint.model, "base_url": url, "api_key": endpoint.api_key}
        config = {
            "model": {
                "provider": "custom",
                "default": endpoint.model,
                "base_url": url,
                "api_key": endpoint.api_key,
                "context_length": s.context,
                "max_tokens": s.max_tokens,
            },
            "toolsets": s.toolsets,
            "auxiliary": {task: dict(served) for task in AUXILIARY}
            | {"title_generation": dict(served, enabled=False)},
            "compression": {"enabled": False},
            "memory": {"memory_enabled": False, "user_profile_enabled": False, "nudge_interval": 0},
            "skills": {"creation_nudge_interval": 0},
            "curator": {"enabled": False},
            "security": {"tirith_enabled": False},
            "model_catalog": {"enabled": False},
            "lsp": {"enabled": False},
        }
        cache = {"ts": NEVER, "behind": 0, "rev": None, "ver": self.pin.version if self.pin else ""}
        # YAML is a superset of JSON: the config is written as JSON
        return {CONFIG: json.dumps(config, indent=2), ".hermes/.update_check": json.dumps(cache)}
