"""`polar recipes check`: every recipe judged by NeMo-RL's own code, then at the seam between NeMo-RL and us.

NeMo-RL's part (`nemo_polar.nemo_rl.worker`, run in NeMo-RL's Python): its loader (`defaults:` chain,
`_override_`), its Hydra override parser, `MasterConfig`, its `VllmConfig` type and the Gym entry point's
set-up and assertion. Nothing of NeMo-RL's schema is written down here.

Ours, on the config NeMo-RL resolved (`SEAM`): our agent section against our strict models, the sampling
pair the proxy pins against the one NeMo-RL's vLLM server asserts, and importance-sampling truncation that
NeMo-RL would silently ignore. One error names its recipe and its key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator

from ..config import BackendConfig, Strict
from ..contracts import EvaluatorSpec, HarnessSpec, RuntimeSpec, SessionBudget
from ..errors import ConfigError, problems
from ..nemo_rl import NemoRL, NemoRLNotFound, locate
from ..paths import ROOT

RECIPES_DIR = ROOT / "recipes"
POLAR_AGENT_PATH = "env.nemo_gym.polar_agent.responses_api_agents.polar_agent"

# What `polar launch slurm` adds to every run, so a recipe that breaks under them fails here, not on the cluster.
SAMPLE_OVERRIDES = [
    "cluster.num_nodes=2",
    "++logger.wandb.name=polar-recipes-check",
    "++checkpointing.checkpoint_dir=results/polar-recipes-check",
    f"{POLAR_AGENT_PATH}.rollout_url=http://node-0:6001",
]


class ResourcesServerRef(Strict):
    type: Literal["resources_servers"] = "resources_servers"
    name: str = "polar_resources"


class ModelServerRef(Strict):
    type: Literal["responses_api_models"] = "responses_api_models"
    name: str = "policy_model"


class PolarAgentConfig(Strict):
    """Our Gym agent instance (`env.nemo_gym.polar_agent.responses_api_agents.polar_agent`): what each `/run`
    submits to the rollout server. `runtime.image: null` means each dataset row names its own image."""

    entrypoint: str = "app.py"
    rollout_url: str = Field(description="the rollout server, on the first node")
    control_token: str | None = None
    harness: HarnessSpec
    runtime: dict[str, Any] = Field(default_factory=dict)
    builder: Literal["per_request", "prefix_tree"] = "prefix_tree"
    evaluator: EvaluatorSpec = EvaluatorSpec()
    budget: SessionBudget = SessionBudget()
    backend: BackendConfig = BackendConfig(engine="nemo_rl")
    session_timeout_s: float = Field(2400, gt=0)
    agent_timeout_s: float = Field(1800, gt=0)
    group_size: int | None = Field(None, ge=1)
    early_stop_k: int | None = Field(None, ge=1)
    timeout_reward: Literal["mask", "zero"] = "mask"
    model_server: ModelServerRef = ModelServerRef()
    resources_server: ResourcesServerRef | None = None
    upstream_key: str | None = "policy_base_url"
    upstream_model_key: str | None = "policy_model_name"
    poll_interval_s: float = Field(1.0, gt=0)
    wait_grace_s: float = Field(120.0, ge=0)
    concurrency: int = Field(512, ge=1)

    @field_validator("runtime")
    @classmethod
    def _runtime(cls, value: dict[str, Any]) -> dict[str, Any]:
        spec = dict(value)
        if spec.get("kind", "local") != "local" and not spec.get("image"):
            spec["image"] = "<each row's image>"
        RuntimeSpec.model_validate(spec)
        return value


def _get(cfg: dict, dotted: str, default: Any = None) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


# --- the seam: what NeMo-RL cannot know about us -------------------------------------------------------
Rule = Callable[[dict], Iterator[tuple[str, str]]]


def _agent(cfg: dict) -> Iterator[tuple[str, str]]:
    section = _get(cfg, POLAR_AGENT_PATH)
    if section is None:
        yield POLAR_AGENT_PATH, "missing: our Gym agent instance (harness, runtime, evaluator, rollout_url)"
        return
    try:
        agent = PolarAgentConfig.model_validate(section)
    except ValidationError as exc:
        for line in problems(exc, whole="section"):
            key, _, message = line.partition(": ")
            yield f"{POLAR_AGENT_PATH}.{key}", message
        return
    if agent.backend.engine != "nemo_rl":
        yield f"{POLAR_AGENT_PATH}.backend.engine", "must be nemo_rl: the proxy talks to NeMo-RL's vLLM server"
    try:
        from ..evaluators import EVALUATORS

        EVALUATORS[agent.evaluator.kind].parse_settings(agent.evaluator.config)
    except ConfigError as exc:
        if "cannot load" not in str(exc):  # an optional extra (swebench) absent here: its config is checked on use
            yield f"{POLAR_AGENT_PATH}.evaluator", str(exc)
    paths = _get(cfg, "env.nemo_gym.config_paths") or []
    if not any("polar_agent" in str(p) for p in paths):
        yield "env.nemo_gym.config_paths", "does not name the polar_agent config (responses_api_agents/polar_agent)"


def _sampling(cfg: dict) -> Iterator[tuple[str, str]]:
    """NeMo-RL's vLLM server asserts its (temperature, top_p) on every call; our proxy pins its own pair."""
    pinned = _get(cfg, f"{POLAR_AGENT_PATH}.backend.sampling", {}) or {}
    for key in ("temperature", "top_p"):
        want = _get(cfg, f"policy.generation.{key}")
        if key in pinned and pinned[key] != want:
            yield (
                f"{POLAR_AGENT_PATH}.backend.sampling.{key}",
                f"{pinned[key]!r} differs from policy.generation.{key}={want!r}: every call would fail",
            )


def _importance_sampling(cfg: dict) -> Iterator[tuple[str, str]]:
    """NeMo-RL applies the ratio only with a truncation type and says nothing otherwise: unbounded weights."""
    if _get(cfg, "loss_fn.truncated_importance_sampling_ratio") is not None and not _get(
        cfg, "loss_fn.truncated_importance_sampling_type"
    ):
        yield (
            "loss_fn.truncated_importance_sampling_type",
            "unset, so truncated_importance_sampling_ratio is ignored and importance weights are unbounded "
            "(set tis, icepop or seq-mask-tis)",
        )


SEAM: tuple[Rule, ...] = (_agent, _sampling, _importance_sampling)


def _report(name: str, judged: dict[str, Any]) -> list[dict[str, str]]:
    found = [(e["key"], e["message"]) for e in judged["errors"]]
    if judged["config"] is not None:
        for rule in SEAM:
            found += list(rule(judged["config"]))
    return [{"recipe": name, "key": k, "message": m} for k, m in dict.fromkeys(found)]


def check_recipes(jobs: list[tuple[Path, list[str]]], nemo_rl: NemoRL | None = None) -> list[list[dict[str, str]]]:
    """Each (recipe, overrides)'s problems, NeMo-RL's and ours, in one run of NeMo-RL's Python."""
    nemo_rl = nemo_rl or locate()
    payload = {"recipes": [{"path": str(Path(p).resolve()), "overrides": list(o)} for p, o in jobs]}
    answer = nemo_rl.call("validate", payload)
    return [_report(Path(p).name, judged) for (p, _), judged in zip(jobs, answer["recipes"], strict=True)]


def check_recipe(path: str | Path, overrides: list[str] | None = None) -> list[dict[str, str]]:
    """Every problem of one recipe, as {recipe, key, message}."""
    return check_recipes([(Path(path), list(overrides or []))])[0]


def recipe_paths(paths: list[str] | None = None) -> list[Path]:
    if paths:
        return [Path(p) for p in paths]
    return sorted(RECIPES_DIR.glob("*.yaml"))


def check(paths: list[str] | None = None, overrides: list[str] | None = None) -> dict[str, Any]:
    """`polar recipes check`: the report as one JSON-able object."""
    recipes = recipe_paths(paths)
    overrides = SAMPLE_OVERRIDES + list(overrides or [])
    report: dict[str, Any] = {"recipes": len(recipes), "names": [r.name for r in recipes], "overrides": overrides}
    try:
        nemo_rl = locate()
    except NemoRLNotFound as exc:
        missing = {"recipe": "*", "key": "NEMO_RL_DIR", "message": str(exc)}
        return report | {"nemo_rl": None, "errors": [missing], "ok": False}
    errors = [e for found in check_recipes([(r, overrides) for r in recipes], nemo_rl) for e in found]
    where = {"dir": str(nemo_rl.dir), "python": str(nemo_rl.python), "commit": nemo_rl.commit}
    return report | {"nemo_rl": where, "errors": errors, "ok": not errors and bool(recipes)}
