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

from .base import Endpoint, Inside
from .opencode import INSTRUCTION, Opencode, RunSettings, config
from .versions import Pin

BINARY = "node/lib/node_modules/@kilocode/cli/node_modules/@kilocode/cli-linux-x64/bin/kilo"


class Kilocode(Opencode):
    name = "kilocode"
    # 7.8.1 is on npm without its linux-x64 binary package; 7.7.7 is the newest with both
    pin = Pin("@kilocode/cli", "7.7.7", "npm")
    side_calls = {}  # `kilo run` titles a session with its prompt: no call
    Settings = RunSettings
    # its logs, and its sessions (messages, tool parts) in one SQLite database
    log_files = (
        ".local/share/kilo/log/*.log",
        ".local/share/kilo/kilo.db",
        ".local/share/kilo/kilo.db-wal",
    )
    binary = BINARY
    switch = "KILO"
    # opencode's, and Kilo's own: session upload and presence, external skills, Claude Code's prompts and skills
    off = (
        "AUTOUPDATE",
        "MODELS_FETCH",
        "SHARE",
        "LSP_DOWNLOAD",
        "DEFAULT_PLUGINS",
        "SESSION_INGEST",
        "PRESENCE",
        "EXTERNAL_SKILLS",
        "CLAUDE_CODE",
    )

    def config(self, endpoint: Endpoint) -> dict:
        return config(endpoint, self.settings) | {"experimental": {"openTelemetry": False}}

    def switches(self, inside: Inside) -> dict[str, str]:
        history = () if self.settings.compaction else ("AUTOCOMPACT", "PRUNE")
        wasm = (inside.tools / BINARY).parent / "tree-sitter"  # what its npm wrapper would set
        return {f"KILO_DISABLE_{name}": "1" for name in (*self.off, *history)} | {
            "KILO_TREE_SITTER_WASM_DIR": str(wasm),
            "KILO_TELEMETRY_LEVEL": "off",
            "KILO_NO_DAEMON": "1",
        }

    def files(self, task: str) -> dict[str, str]:
        return {INSTRUCTION: task}  # no plugin install to head off
