"""Cline: OpenAI Chat Completions, streaming, through its `openai-compatible` provider.

`cline` on npm is a Node.js wrapper around a native (Bun-compiled) binary in `@cline/cli-linux-x64`; the adapter
starts that binary itself (no node in between). One task runs headless as `cline --json -c <work> -- <instruction>`
(a prompt with JSON output runs in act mode, every tool auto-approved, and exits when the agent is done). Its provider
(the proxy, the session's key, the served model) is the one `cline auth -p openai-compatible` would write, in
`~/.cline/data/settings/providers.json`; its global settings turn telemetry and auto-update off. In its default
backend mode it also starts a "hub" daemon in the background, which outlives the run: CLINE_SESSION_BACKEND_MODE=local
runs the session in the process itself. Compaction is off (`--compaction off`: the history it sends is never
rewritten). It has no step limit of its own on the command line: the proxy holds it to `max_steps` model calls.
"""

from __future__ import annotations

from .base import Endpoint, Harness, Inside, Launch, dump
from .versions import Pin

PROVIDER = "openai-compatible"
# the native binary npm installs beside the wrapper (its postinstall, which would link it into bin/, may not run)
BINARY = "node/lib/node_modules/cline/node_modules/@cline/cli-linux-x64/bin/cline"
SETTINGS = ".cline/data/settings"  # under HOME


class Cline(Harness):
    name = "cline"
    pin = Pin("cline", "3.0.65", "npm")
    dialects = ("openai_chat",)
    stops_at_max_steps = False  # no step limit on its command line: the proxy holds it to max_steps model calls
    # its log, and each session's messages and metadata
    log_files = (".cline/data/logs/*.log", ".cline/data/sessions/**/*.json")

    def launch(self, task: str, endpoint: Endpoint, inside: Inside, max_steps: int) -> Launch:
        argv = [
            str(inside.tools / BINARY),
            "--json",
            "--compaction",
            "off",
            "-c",
            str(inside.work),
            "-P",
            PROVIDER,
            "-m",
            endpoint.model,
            "--",  # the instruction word for word, even one starting with a dash
            task,
        ]
        env = self.base_env(inside) | {
            "CLINE_SESSION_BACKEND_MODE": "local",  # no background hub daemon left running after it
            "CLINE_DIR": str(inside.home / ".cline"),
        }
        provider = {
            "settings": {
                "provider": PROVIDER,
                "apiKey": endpoint.api_key,
                "model": endpoint.model,
                "baseUrl": f"{endpoint.base_url}/v1",
            },
            "updatedAt": "2026-01-01T00:00:00.000Z",  # without it the entry is ignored (and api.openai.com used)
            "tokenSource": "manual",
        }
        providers = {"version": 1, "lastUsedProvider": PROVIDER, "modes": {}, "providers": {PROVIDER: provider}}
        settings = {"telemetryOptOut": True, "autoUpdateEnabled": False}
        files = {f"{SETTINGS}/providers.json": dump(providers), f"{SETTINGS}/global-settings.json": dump(settings)}
        return Launch(argv, env, files)
