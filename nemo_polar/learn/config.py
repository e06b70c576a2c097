"""`polar learn`'s settings and the constants its serving shares with a launch's gateways (`--learn`): what the
launch and each node's sidecar read without importing the loop (torch)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ..config import Strict
from ..contracts import HarnessSpec, NodeCapacity, RuntimeSpec
from ..paths import ROOT, TINY_MODEL

# Toy prompts whose reward (the answer holds a digit) the random model earns tens of percent of the time:
# a dense enough signal for a few steps to move it (a sparse one, a few percent, does not learn).
PROMPTS = (
    "Write a number.",
    "How many legs does a spider have?",
    "Give me a year.",
    "What is 2 + 2?",
    "Count to three.",
    "Name a prime.",
    "What time is it?",
    "Pick a digit.",
)
# What every proxy in front of the trainer's vLLM sends it, whatever the agent asks: the trainer's sampling
# pair (logprobs of the plain softmax), and version 0 (the weights as built) until the first update.
SAMPLING = {"temperature": 1.0, "top_p": 1.0}
FIRST_VERSION = "0"
SERVED_NAME = "polar-learn"
# the default agent (examples/one_call_agent.py) reaches its sandbox as the working copy, so it runs in every
# runtime, a container's too
AGENT_REPO = ROOT / "examples"


class LearnConfig(Strict):
    """`conf/learn.yaml`."""

    @model_validator(mode="after")
    def _agent_in_the_working_copy(self) -> LearnConfig:
        if self.runtime.repo is None:
            self.runtime = self.runtime.model_copy(update={"repo": str(AGENT_REPO)})
        return self

    @model_validator(mode="after")
    def _parts_that_work_together(self) -> LearnConfig:
        """Who collects, serves and updates: the combinations that run, checked once, before anything starts."""
        if self.serving == "nemo_rl" and self.rollout_url is not None:  # the job's gateways are set for vLLM
            raise ValueError("serving=nemo_rl runs with a rollout server of its own (rollout_url: null)")
        if self.update == "nemo_rl" and not self.nemo_rl:
            raise ValueError("update=nemo_rl trains on NeMo-RL's own batches: it needs nemo_rl=true")
        if self.rollouts == "nemo_rl" and (self.rollout_url is not None or not self.nemo_rl or self.update == "polar"):
            raise ValueError(
                "rollouts=nemo_rl: NeMo-RL's Gym actor collects for NeMo-RL's loss (nemo_rl=true, update auto or "
                "nemo_rl) against a rollout server of this run's own (rollout_url: null)"
            )
        if self.mode == "async" and self.rollouts == "nemo_rl" and self.max_age < 1:
            raise ValueError(
                "mode=async rollouts=nemo_rl: NeMo-RL's trajectory collector generates for the next max_age weight "
                "versions (max_trajectory_age_steps): max_age >= 1"
            )
        return self

    run_dir: str = Field(
        "runs/learn", description="each run writes a folder of its own in it, named by its start time (policy, logs)"
    )
    steps: int = Field(20, ge=1, description="GRPO steps: each runs its sessions, then one update of the weights")
    prompts: int = Field(8, ge=1, le=len(PROMPTS), description="tasks per step")
    samples: int = Field(8, ge=2, description="sessions per task: the GRPO group")
    max_tokens: int = Field(8, ge=1, description="each answer's cap: length alone cannot earn the reward")
    lr: float = Field(
        3e-3, gt=0, description="the learning rate of the policy's Adam optimiser (every update, whichever loss)"
    )
    mode: Literal["sync", "async"] = Field(
        "sync",
        description="sync: each step runs its sessions, then updates; async: sessions stay in flight while the policy "
        "trains and its new weights are published, so no step waits for its slowest session, and each group trains "
        "against the logprobs it was sampled with (NeMo-RL's loss: with its importance-sampling correction)",
    )
    max_age: int = Field(
        1,
        ge=0,
        description="mode=async: a group whose oldest call was sampled more than this many updates before the weights "
        "it would train is left out, with its reason (NeMo-RL's grpo.async_grpo.max_trajectory_age_steps)",
    )
    pattern: str = Field("[0-9]", description="the reward: the answer contains it")
    harness: HarnessSpec = Field(
        HarnessSpec(name="shell", command="python3 one_call_agent.py"),
        description="the agent of every session (default: examples/one_call_agent.py, one model call)",
    )
    runtime: RuntimeSpec = Field(
        default_factory=RuntimeSpec,
        description="the sessions' sandbox (runtime=docker runtime.image=...); its working copy is examples/ unless "
        "it names a repo",
    )
    agent_timeout_s: float = Field(
        120, gt=0, description="each session's agent budget: past it the session is left out of the step, not scored"
    )
    session_timeout_s: float = Field(300, gt=0, description="each session's whole budget, set-up to reward")
    model: str = Field(
        str(TINY_MODEL), description="the starting weights' folder, copied into the run; the copy is what is trained"
    )
    capacity: NodeCapacity = NodeCapacity(init=8, run=16, postrun=8, ready=16)
    serving: Literal["vllm", "nemo_rl"] = Field(
        "vllm",
        description="what serves the policy: vLLM, or NeMo-RL's own vLLM HTTP server (its generation worker's, over "
        "the vLLM it pins: scripts/setup.sh nemo_rl_vllm), with a rollout server of this run's own",
    )
    rollouts: Literal["polar", "nemo_rl"] = Field(
        "polar",
        description="who collects each step's rollouts: our client of the rollout server, or NeMo-RL's own Gym actor "
        "(spinup_nemo_gym_actor, run_rollouts: scripts/setup.sh nemo_rl_gym) driving our Gym servers, which Gym's "
        "builder starts; NeMo-RL then trains the primary chain of each session, as it does through Gym",
    )
    nemo_rl: bool = Field(True, description="post-process by NeMo-RL's own code when a checkout is found")
    update: Literal["auto", "polar", "nemo_rl"] = Field(
        "auto",
        description="the GRPO loss: NeMo-RL's (its advantage estimator and ClippedPGLossFn, configured by `recipe`), "
        "our own (learn/policy.py), or auto: NeMo-RL's when it post-processes",
    )
    chains: Literal["all", "primary"] = Field(
        "all",
        description="what NeMo-RL's loss trains of a session: every chain (a row each, its rollout's advantage, each "
        "sampled token once), or the primary chain only (what NeMo-RL trains through Gym at the commit we target)",
    )
    recipe: str = Field(
        "recipes/grpo_qwen3.5_4b_polar_swe.yaml",
        description="the recipe whose grpo and loss_fn sections NeMo-RL's loss runs with (relative: to the repo)",
    )
    recipe_overrides: list[str] = Field(
        default_factory=list, description="Hydra overrides for it, e.g. loss_fn.ratio_clip_max=0.2"
    )
    solved_after: int | None = Field(
        3, ge=1, description="stop once this many steps in a row gave no group any signal (every sample the same)"
    )
    rollout_url: str | None = Field(
        None,
        description="a rollout server whose gateway nodes run the sessions (a Slurm job's); null: one here, one node",
    )
    control_token: str | None = Field(
        None, description="rollout_url's (a launch hands it over as POLAR_CONTROL_TOKEN)"
    )
    serve_host: str = Field("127.0.0.1", description="where vLLM listens (0.0.0.0: for the nodes of rollout_url)")
    node_records: str | None = Field(
        None, description="with rollout_url: the nodes' record stores (a glob), read for each call's policy version"
    )
