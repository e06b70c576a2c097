"""opencode: OpenAI Chat Completions, streaming, through its OpenAI-compatible provider.

Its whole configuration is one JSON in OPENCODE_CONFIG_CONTENT (a provider `polar` at the proxy, every model it may
pick pinned to the served one); HOME and the XDG folders are the session's. Everything it would fetch besides the
model is off (update check, models.dev, share, LSP downloads, default plugins), and, unless its settings turn them
on, so is everything that rewrites the history it sends (auto-compaction, pruning of old tool output: the session
goes on in a chain of its own) or adds calls that are not the agent's own (the session title: a side call, named so
in the traces and never trained in the agent's place). The repository's own AGENTS.md is read, as in any run of
opencode; its own opencode.json cannot move the provider (this configuration wins). The instruction goes in on
stdin, from a file in HOME: given as arguments, opencode quotes every one with a space in it and crashes on one that
parses as a number. The toolchain's Python opens the file as stdin and execs opencode (nothing of the image's, no
process in between).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field

from ..runtimes.toolchain import PYTHON
from .base import Endpoint, Harness, HarnessSettings, Inside, Launch, dump
from .versions import Pin

PROVIDER = "polar"
INSTRUCTION = ".polar/instruction.md"  # under HOME
STDIN_FROM = "import os, sys; os.dup2(os.open(sys.argv[1], os.O_RDONLY), 0); os.execv(sys.argv[2], sys.argv[2:])"
PLUGIN_LOCK = {"lockfileVersion": 3, "packages": {"": {"dependencies": {"@opencode-ai/plugin": "*"}}}}


class RunSettings(HarnessSettings):
    """What `run` takes, in opencode and its forks."""

    max_tokens: int = Field(
        4096,
        gt=0,
        description="the `max_tokens` it sends on every call (opencode's own default, 32000, fills a small context)",
    )
    context: int = Field(32768, gt=0, description="the context window it assumes for the served model")
    body: dict[str, Any] = Field(
        default_factory=dict, description="more fields of every request it sends (its model `options`), e.g. top_p"
    )
    compaction: bool = Field(
        False, description="its auto-compaction and pruning of old tool output (the session goes on in a new chain)"
    )


class OpencodeSettings(RunSettings):
    title: bool = Field(False, description="its session-title call (a side call, first of the session)")


def config(endpoint: Endpoint, settings: RunSettings) -> dict:
    """A provider `polar` at the proxy, every model it may pick the served one, nothing fetched or shared."""
    model = endpoint.model
    limit = {"context": settings.context, "output": settings.max_tokens}
    provider = {
        "npm": "@ai-sdk/openai-compatible",  # bundled in its binary: nothing installed at run time
        "name": PROVIDER,
        "options": {"baseURL": f"{endpoint.base_url}/v1", "apiKey": endpoint.api_key},
        "models": {model: {"name": model, "limit": limit, "options": settings.body}},
    }
    return {
        "provider": {PROVIDER: provider},
        "enabled_providers": [PROVIDER],
        "model": f"{PROVIDER}/{model}",
        "small_model": f"{PROVIDER}/{model}",
        "autoupdate": False,
        "share": "disabled",
        "snapshot": False,
        "lsp": False,
        "formatter": False,
        "compaction": {"auto": settings.compaction, "prune": settings.compaction},
    }


class Opencode(Harness):
    name = "opencode"
    stops_at_max_steps = False  # max_steps is enforced by the proxy, as a budget of model calls
    side_calls = {"title": "You are a title generator"}  # the session title, asked of the small model first
    pin = Pin("opencode-ai", "1.18.33", "npm")
    dialects = ("openai_chat",)
    Settings = OpencodeSettings
    settings: RunSettings
    # its log, and its sessions (messages, tool parts) in one SQLite database
    log_files = (
        ".local/share/opencode/log/*.log",
        ".local/share/opencode/opencode.db",
        ".local/share/opencode/opencode.db-wal",
    )
    binary = "node/bin/opencode"  # under the toolchain: a native binary, no node
    switch = "OPENCODE"  # its environment switches' prefix (a fork renames them)
    # what its switches turn off: the update check, models.dev, share, LSP downloads, default plugins, and the
    # rewriting of history (auto-compaction, pruning) unless its config turns that on
    off = ("AUTOUPDATE", "AUTOCOMPACT", "PRUNE", "MODELS_FETCH", "SHARE", "LSP_DOWNLOAD", "DEFAULT_PLUGINS")

    def config(self, endpoint: Endpoint) -> dict:
        assert isinstance(self.settings, OpencodeSettings)
        title = {"agent": {"title": {"disable": not self.settings.title}}}
        return {"$schema": "https://opencode.ai/config.json"} | config(endpoint, self.settings) | title

    def switches(self, inside: Inside) -> dict[str, str]:
        return {f"{self.switch}_DISABLE_{name}": "1" for name in self.off}

    def files(self, task: str) -> dict[str, str]:
        # it npm-installs @opencode-ai/plugin (for plugins of one's own; none here) into its config folder
        # unless a lock file there lists it: the sandbox reaches no registry, so the lock says it is there
        return {
            INSTRUCTION: task,
            ".config/opencode/package-lock.json": dump(PLUGIN_LOCK),
            ".config/opencode/node_modules/.keep": "",
        }

    def launch(self, task: str, endpoint: Endpoint, inside: Inside, max_steps: int) -> Launch:
        home = inside.home
        argv = [
            str(inside.tools / PYTHON),
            "-I",
            "-S",
            "-c",
            STDIN_FROM,
            str(home / INSTRUCTION),
            str(inside.tools / self.binary),
            "run",
            "--auto",
            "--format",
            "json",
            "--dir",
            str(inside.work),
            "-m",
            f"{PROVIDER}/{endpoint.model}",
        ]
        env = self.base_env(inside) | {
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_DATA_HOME": str(home / ".local/share"),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "XDG_STATE_HOME": str(home / ".local/state"),
            f"{self.switch}_CONFIG_CONTENT": json.dumps(self.config(endpoint)),
        }
        return Launch(argv, env | self.switches(inside), self.files(task))
