"""OpenHands, through its SDK: Chat Completions via LiteLLM, non-streaming; terminal and file-editor
tools in a local workspace (no docker). The SDK needs Python >= 3.12, so a small runner script of
ours runs in its own venv (.deps/openhands, made by `scripts/setup.sh openhands`)."""

from __future__ import annotations

from ..runtimes.toolchain import SCRIPTS
from .base import Endpoint, Harness, Inside, Launch
from .versions import Pin

RUNNER = SCRIPTS / "openhands_runner.py"  # run from the in-sandbox scripts folder


class OpenHands(Harness):
    name = "openhands"
    pin = Pin("openhands-sdk", "1.34.0", "pip", "openhands", extra=("openhands-tools==1.34.0", "litellm==1.106.2"))
    dialects = ("openai_chat",)
    log_files = (".openhands/conversations/**/*.json",)

    def launch(self, task: str, endpoint: Endpoint, inside: Inside, max_steps: int) -> Launch:
        argv = [
            # isolated: not the runner's folder on sys.path, where openhands.py would shadow the SDK
            *inside.python("openhands"),
            str(inside.scripts / RUNNER.name),
            "--base-url",
            f"{endpoint.base_url}/v1",
            "--model",
            endpoint.model,
            "--workdir",
            str(inside.work),
            "--max-steps",
            str(max_steps),
            "--persist",
            str(inside.home / ".openhands/conversations"),
            task,
        ]
        env = self.base_env(inside) | {
            "POLAR_API_KEY": endpoint.api_key,
            "OPENHANDS_SUPPRESS_BANNER": "1",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no cost-map download from GitHub
            "LOG_TO_FILE": "false",
            "PYTHONUNBUFFERED": "1",
        }
        return Launch(argv, env)
