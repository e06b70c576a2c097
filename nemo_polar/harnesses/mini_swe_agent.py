"""mini-swe-agent: Chat Completions through LiteLLM, non-streaming, one bash tool."""

from __future__ import annotations

from .base import Endpoint, Harness, Inside, Launch
from .versions import Pin


class MiniSweAgent(Harness):
    name = "mini_swe_agent"
    # litellm needs mcp, or a run retries forever on "No module named 'mcp'"
    pin = Pin("mini-swe-agent", "2.4.6", "pip", "python", "mini", ("litellm==1.106.2", "mcp==2.3.0"))
    dialects = ("openai_chat",)
    log_files = ("trajectory.json",)

    def launch(self, task: str, endpoint: Endpoint, inside: Inside, max_steps: int) -> Launch:
        argv = [
            *inside.python("python"),  # the toolchain's Python 3.11
            "-m",
            "minisweagent.run.mini",
            "-t",
            task,
            "-m",
            f"openai/{endpoint.model}",
            "-y",
            "--exit-immediately",
            "-l",
            "0",
            "-c",
            "mini.yaml",
            "-c",
            f"model.model_kwargs.api_base={endpoint.base_url}/v1",
            "-c",
            f"agent.step_limit={max_steps}",
            "-c",
            "model.cost_tracking=ignore_errors",
            "-o",
            str(inside.home / "trajectory.json"),
        ]
        env = self.base_env(inside) | {
            "OPENAI_API_KEY": endpoint.api_key,
            "MSWEA_CONFIGURED": "true",  # no set-up wizard
            "MSWEA_GLOBAL_CONFIG_DIR": str(inside.home / ".mini"),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        }
        return Launch(argv, env)
