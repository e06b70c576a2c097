"""Kilo Code: OpenAI Chat Completions, streaming, through its OpenAI-compatible provider.

Its CLI is a fork of opencode (its log calls itself so, and its config schema, `run` command and switches are
opencode's under KILO_ names), launched the same way (`opencode.py`): `kilo run --auto --format json`, its whole
configuration in KILO_CONFIG_CONTENT (a provider `polar` at the proxy, every model it may pick pinned to the served
one), HOME and the XDG folders the session's, the instruction on stdin. The npm package's `kilo` is a Node.js wrapper
around a native binary in `@kilocode/cli-linux-x64`; the adapter starts that binary. Off: the update check,
models.dev, sharing and session upload to Kilo's cloud, telemetry, its local daemon, LSP downloads, default plugins,
Claude Code's prompts and skills, and (unless `compaction` turns them on) auto-compaction and pruning of old tool
output. `kilo run` makes no title call (the title is the truncated prompt). Its `steps` do not bound a model that
keeps calling tools: the proxy holds it to `max_steps` model calls. It gives up by itself after three calls in a row
with invalid tool arguments.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field

from ..runtimes.toolchain import PYTHON
from .base import Endpoint, Harness, HarnessSettings, Inside, Launch
from .opencode import INSTRUCTION, STDIN_FROM
from .versions import Pin

PROVIDER = "polar"
BINARY = "node/lib/node_modules/@kilocode/cli/node_modules/@kilocode/cli-linux-x64/bin/kilo"


class KilocodeSettings(HarnessSettings):
    max_tokens: int = Field(
        4096, gt=0, description="the `max_tokens` it sends on every call (its own default fills a small context)"
    )
    context: int = Field(32768, gt=0, description="the context window it assumes for the served model")
    body: dict[str, Any] = Field(
        default_factory=dict, description="more fields of every request it sends (its model `options`), e.g. top_p"
    )
    compaction: bool = Field(
        False, description="its auto-compaction and pruning of old tool output (the session goes on in a new chain)"
    )


def config(endpoint: Endpoint, settings: KilocodeSettings) -> dict:
    model = endpoint.model
    provider = {
        "npm": "@ai-sdk/openai-compatible",  # bundled in its binary: nothing installed at run time
        "name": PROVIDER,
        "options": {"baseURL": f"{endpoint.base_url}/v1", "apiKey": endpoint.api_key},
        "models": {
            model: {
                "name": model,
                "limit": {"context": settings.context, "output": settings.max_tokens},
                "options": settings.body,
            }
        },
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
        "experimental": {"openTelemetry": False},
    }


class Kilocode(Harness):
    name = "kilocode"
    # 7.8.1 is on npm without its linux-x64 binary package; 7.7.7 is the newest with both
    pin = Pin("@kilocode/cli", "7.7.7", "npm")
    dialects = ("openai_chat",)
    stops_at_max_steps = False  # max_steps is enforced by the proxy, as a budget of model calls
    Settings = KilocodeSettings
    settings: KilocodeSettings
    # its logs, and its sessions (messages, tool parts) in one SQLite database
    log_files = (
        ".local/share/kilo/log/*.log",
        ".local/share/kilo/kilo.db",
        ".local/share/kilo/kilo.db-wal",
    )

    def launch(self, task: str, endpoint: Endpoint, inside: Inside, max_steps: int) -> Launch:
        home = inside.home
        binary = inside.tools / BINARY
        argv = [
            str(inside.tools / PYTHON),
            "-I",
            "-S",
            "-c",
            STDIN_FROM,  # the instruction on stdin, as for opencode: as arguments it is split into words
            str(home / INSTRUCTION),
            str(binary),
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
            "KILO_CONFIG_CONTENT": json.dumps(config(endpoint, self.settings)),
            "KILO_TREE_SITTER_WASM_DIR": str(binary.parent / "tree-sitter"),  # what its npm wrapper would set
            "KILO_TELEMETRY_LEVEL": "off",
            "KILO_NO_DAEMON": "1",
            "KILO_DISABLE_AUTOUPDATE": "1",
            "KILO_DISABLE_MODELS_FETCH": "1",
            "KILO_DISABLE_SHARE": "1",
            "KILO_DISABLE_SESSION_INGEST": "1",
            "KILO_DISABLE_PRESENCE": "1",
            "KILO_DISABLE_LSP_DOWNLOAD": "1",
            "KILO_DISABLE_DEFAULT_PLUGINS": "1",
            "KILO_DISABLE_EXTERNAL_SKILLS": "1",
            "KILO_DISABLE_CLAUDE_CODE": "1",
        }
        if not self.settings.compaction:
            env |= {"KILO_DISABLE_AUTOCOMPACT": "1", "KILO_DISABLE_PRUNE": "1"}
        return Launch(argv, env, {INSTRUCTION: task})
