"""`shell`: a command of the user's own, for agents that are not one of the bundled CLIs.

The command runs under `sh -c` in the working copy. It finds the proxy and its key in the usual
variables of each SDK (OpenAI, Anthropic, Gemini) and the task in POLAR_TASK, so an unmodified
script built on any of those SDKs talks to the proxy without knowing it.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from .base import Endpoint, Harness, HarnessSettings, Inside, Launch


class ShellSettings(HarnessSettings):
    command: str | None = Field(None, description="required: run with sh -c in the working copy")

    @model_validator(mode="after")
    def _has_command(self) -> ShellSettings:
        if not self.command:
            raise ValueError("harness `shell` needs `command` (harness.command, run with sh -c in the working copy)")
        if self.version is not None:
            raise ValueError("harness `shell` runs your command: it installs no CLI whose version could be set")
        return self


# `polar runtime check`'s agent: one Chat Completions call over bash's /dev/tcp (the image needs no Python)
CHECK_AGENT = r"""bash -c '
u=${OPENAI_BASE_URL#http://}; hp=${u%%/*}; host=${hp%:*}; port=${hp##*:}
body="{\"model\": \"$POLAR_MODEL\", \"messages\": [{\"role\": \"user\", \"content\": \"Say hello.\"}]}"
form="POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"
form="${form}Content-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
exec 3<>/dev/tcp/$host/$port
printf "$form" "$hp" "$OPENAI_API_KEY" "${#body}" "$body" >&3
head -c 600 <&3 | head -1 | grep -q " 200 "
'"""


class Shell(Harness):
    name = "shell"
    stops_at_max_steps = False  # max_steps is enforced by the proxy, as a budget of model calls
    dialects = ("openai_chat", "openai_responses", "anthropic", "gemini")
    Settings = ShellSettings
    settings: ShellSettings
    check_options = {"command": CHECK_AGENT}

    @property
    def command(self) -> str:
        assert self.settings.command is not None
        return self.settings.command

    def launch(self, task: str, endpoint: Endpoint, inside: Inside, max_steps: int) -> Launch:
        env = self.base_env(inside) | {
            "POLAR_TASK": task,
            "POLAR_MAX_STEPS": str(max_steps),
            "POLAR_MODEL": endpoint.model,
            "OPENAI_BASE_URL": f"{endpoint.base_url}/v1",
            "OPENAI_API_KEY": endpoint.api_key,
            "ANTHROPIC_BASE_URL": endpoint.base_url,
            "ANTHROPIC_API_KEY": endpoint.api_key,
            "GOOGLE_GEMINI_BASE_URL": endpoint.base_url,
            "GEMINI_API_KEY": endpoint.api_key,
        }
        return Launch(["sh", "-c", self.command], env)
