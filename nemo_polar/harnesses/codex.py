"""Codex CLI: speaks only the Responses API, configured as a custom model provider."""

from __future__ import annotations

from .base import Endpoint, Harness, Inside, Launch
from .versions import Pin


class Codex(Harness):
    name = "codex"
    stops_at_max_steps = False  # max_steps is enforced by the proxy, as a budget of model calls
    pin = Pin("@openai/codex", "0.169.0", "npm")
    dialects = ("openai_responses",)
    log_files = (".codex/sessions/**/*.jsonl", ".codex/log/*.log")

    def launch(self, task: str, endpoint: Endpoint, inside: Inside, max_steps: int) -> Launch:
        provider = (
            f'model_providers.polar={{name="polar",base_url="{endpoint.base_url}/v1",'
            f'wire_api="responses",env_key="POLAR_API_KEY"}}'
        )
        argv = [
            *inside.node("codex"),
            "exec",
            "--skip-git-repo-check",
            "-s",
            "workspace-write",
            "-m",
            endpoint.model,
            "-c",
            "model_provider=polar",
            "-c",
            provider,
            "--cd",
            str(inside.work),
            task,
        ]
        env = self.base_env(inside) | {"CODEX_HOME": str(inside.home / ".codex"), "POLAR_API_KEY": endpoint.api_key}
        return Launch(argv, env, {".codex/config.toml": "check_for_update_on_startup = false\n"})
