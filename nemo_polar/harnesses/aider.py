"""Aider: OpenAI Chat Completions through LiteLLM, streaming; no tools, it edits files by the text formats it asks for.

One run is one message (`--message`, answered once, then its own reflections: at most 3 more calls when an edit fails
to apply or mentions files it then adds), so it has no step limit of ours to take: the proxy holds it to `max_steps`
calls. Every model it may use (main, weak, editor) is the served one at the proxy; its history files and model
metadata live in HOME, never in the working copy; nothing is committed (the grader reads the working copy's diff).
"""

from __future__ import annotations

import json

from pydantic import Field

from .base import Endpoint, Harness, HarnessSettings, Inside, Launch, dump
from .versions import Pin

HISTORY = ".aider"  # under HOME: its input, chat and LLM histories, its caches


class AiderSettings(HarnessSettings):
    edit_format: str | None = Field(
        None, description="its edit format (whole, diff, udiff...); None: the one it picks for the model"
    )
    context: int = Field(32768, gt=0, description="the context window it assumes for the served model")
    max_tokens: int = Field(4096, gt=0, description="the output limit it assumes for the served model")
    map_tokens: int | None = Field(
        None, ge=0, description="its repository map's token budget (0: no map); None: its default"
    )


class Aider(Harness):
    name = "aider"
    pin = Pin("aider-chat", "0.86.2", "pip", "aider")
    dialects = ("openai_chat",)
    Settings = AiderSettings
    # one message per run and at most 3 reflections on it, a bound of its own that max_steps cannot move
    stops_at_max_steps = False
    # its weak model summarises a chat history grown past its limit (in a thread beside the agent's calls); a commit
    # message would be the other, but nothing is committed
    side_calls = {
        "summary": "*Briefly* summarize this partial conversation about programming.",
        "commit": "You are an expert software engineer that generates concise, one-line Git commit messages",
    }
    log_files = (f"{HISTORY}/chat.history.md", f"{HISTORY}/llm.history", f"{HISTORY}/input.history")
    settings: AiderSettings

    def launch(self, task: str, endpoint: Endpoint, inside: Inside, max_steps: int) -> Launch:
        home = inside.home / HISTORY
        model = f"openai/{endpoint.model}"
        s = self.settings
        argv = [
            *inside.python("aider"),  # its own Python 3.11 in the toolchain
            "-m",
            "aider",
            "--model",
            model,
            "--weak-model",  # summaries (and commit messages) would otherwise go to a model of its own choosing
            model,
            "--editor-model",
            model,
            "--openai-api-base",
            f"{endpoint.base_url}/v1",
            "--message",
            task,
            "--yes-always",
            # the working copy is the grader's: no commits, no .gitignore edits, no history files in it
            "--no-auto-commits",
            "--no-dirty-commits",
            "--no-gitignore",
            "--input-history-file",
            str(home / "input.history"),
            "--chat-history-file",
            str(home / "chat.history.md"),
            "--llm-history-file",
            str(home / "llm.history"),
            # its model metadata from HOME: the context it assumes, and no download of litellm's price list
            "--model-metadata-file",
            str(home / "model.metadata.json"),
            # nothing networked or interactive: analytics, update check, release notes, URL scraping, browser
            "--no-analytics",
            "--analytics-disable",
            "--no-check-update",
            "--no-show-release-notes",
            "--no-detect-urls",
            "--no-browser",
            "--no-show-model-warnings",
            "--no-check-model-accepts-settings",
            "--no-pretty",
            "--no-fancy-input",
            "--no-notifications",
            "--no-restore-chat-history",
        ]
        if s.edit_format:
            argv += ["--edit-format", s.edit_format]
        if s.map_tokens is not None:
            argv += ["--map-tokens", str(s.map_tokens)]
        env = self.base_env(inside) | {
            "OPENAI_API_KEY": endpoint.api_key,  # read by LiteLLM; never on the command line
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # LiteLLM's own cost map from its package, not GitHub
            "PYTHONUNBUFFERED": "1",
        }
        info = {
            "max_input_tokens": s.context,
            "max_tokens": s.max_tokens,
            "max_output_tokens": s.max_tokens,
            "input_cost_per_token": 0,
            "output_cost_per_token": 0,
            "litellm_provider": "openai",
            "mode": "chat",
        }
        files = {
            f"{HISTORY}/model.metadata.json": dump({model: info}),
            # its model-info cache, fresh and not empty: an empty or missing one is fetched from GitHub at start
            f"{HISTORY}/caches/model_prices_and_context_window.json": json.dumps({model: info}),
        }
        return Launch(argv, env, files)
