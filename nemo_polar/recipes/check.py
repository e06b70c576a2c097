"""`polar recipes check`: every recipe loaded like NeMo-RL loads it, every key checked before a GPU is spent.

Per recipe: resolve the `defaults:` chain, apply the sample overrides (Hydra grammar, NeMo-RL's struct rules),
resolve interpolations, then check each key against NeMo-RL's schema (schema.py: unknown keys, types, allowed
values, required keys), the cross-key rules of the Gym path (RULES below, each citing research/nemo_rl.md), and
our own agent section against our strict models. One error names its recipe and its key.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator

from ..config import BackendConfig, Strict
from ..errors import ConfigError, problems
from ..server.contracts import EvaluatorSpec, HarnessSpec, RuntimeSpec
from .loader import RecipeError, apply_overrides, load_recipe, resolve
from .schema import KEYS, OPEN, POLAR_AGENT_PATH, REQUIRED, SECTIONS

RECIPES_DIR = Path(__file__).resolve().parents[2] / "recipes"

# What `polar launch slurm` adds to every run, so a recipe that breaks under them fails here, not on the cluster.
SAMPLE_OVERRIDES = [
    "cluster.num_nodes=2",
    "++logger.wandb.name=polar-recipes-check",
    "++checkpointing.checkpoint_dir=results/polar-recipes-check",
    f"{POLAR_AGENT_PATH}.rollout_url=http://node-0:8900",
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
    backend: BackendConfig = BackendConfig(engine="nemo_rl")
    session_timeout_s: float = Field(2400, gt=0)
    agent_timeout_s: float = Field(1800, gt=0)
    model_server: ModelServerRef = ModelServerRef()
    resources_server: ResourcesServerRef | None = None
    upstream_key: str | None = "policy_base_url"
    poll_interval_s: float = Field(1.0, gt=0)
    wait_grace_s: float = Field(120.0, ge=0)
    chains_dir: str | None = None
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


def _has(cfg: dict, dotted: str) -> bool:
    sentinel = object()
    return _get(cfg, dotted, sentinel) is not sentinel


def _type_ok(value: Any, spec: str | tuple) -> bool:
    if isinstance(spec, tuple):
        return value in spec
    checks = {
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "float": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        "bool": lambda v: isinstance(v, bool),
        "str": lambda v: isinstance(v, str),
        "dict": lambda v: isinstance(v, dict),
        "list": lambda v: isinstance(v, list),
        "null": lambda v: v is None,
    }
    return any(checks[t](value) for t in spec.split("|"))


def _describe(spec: str | tuple) -> str:
    return "one of " + ", ".join(repr(v) for v in spec) if isinstance(spec, tuple) else spec.replace("|", " or ")


_SECTION_PREFIXES = {k.rsplit(".", i)[0] for k in KEYS for i in range(1, k.count(".") + 1)}


def _open(path: str) -> bool:
    return any(path == p or path.startswith(p + ".") for p in OPEN)


def schema_errors(cfg: dict) -> Iterator[tuple[str, str]]:
    """(key, message) for each unknown key, wrong type or value, and missing required key."""

    def walk(node: dict, prefix: str) -> Iterator[tuple[str, str]]:
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            if not prefix and key not in SECTIONS:
                yield path, f"unknown top-level section{_hint(path, SECTIONS)}"
            elif path in KEYS:
                if not _type_ok(value, KEYS[path]):
                    yield path, f"expected {_describe(KEYS[path])}, got {value!r}"
            elif path in _SECTION_PREFIXES and isinstance(value, dict):
                yield from walk(value, path)
            elif path in _SECTION_PREFIXES or _open(path):
                if path in _SECTION_PREFIXES and value is not None:
                    yield path, f"expected a mapping, got {value!r}"
            else:
                yield path, f"unknown key{_hint(path, list(KEYS) + list(OPEN))}"

    yield from walk(cfg, "")
    for key in REQUIRED:
        if not _has(cfg, key):
            yield key, "missing required key"


def _hint(path: str, known: Any) -> str:
    close = difflib.get_close_matches(path, list(known), n=1, cutoff=0.8)
    return f" (did you mean {close[0]!r}?)" if close else ""


# --- cross-key rules of the Gym path; each cites research/nemo_rl.md -------------------------------------------
Rule = Callable[[dict], Iterator[tuple[str, str]]]


def _gym_entry_point(cfg: dict) -> Iterator[tuple[str, str]]:
    # §1.1: run_grpo_nemo_gym.py raises unless max_val_samples is null;
    # §2.1: should_use_nemo_gym() asserts both vLLM flags.
    if _get(cfg, "grpo.max_val_samples") is not None:
        yield "grpo.max_val_samples", "must be null with NeMo Gym (the entry point sets it to the validation size)"
    if _get(cfg, "env.should_use_nemo_gym") is not True:
        yield "env.should_use_nemo_gym", "must be true: this recipe runs through NeMo Gym"
    for key in ("async_engine", "expose_http_server"):
        if _get(cfg, f"policy.generation.vllm_cfg.{key}") is not True:
            yield f"policy.generation.vllm_cfg.{key}", "must be true for NeMo Gym (our proxy talks to this server)"
    if _get(cfg, "grpo.max_rollout_turns") is not None:
        yield "grpo.max_rollout_turns", "must be null on the Gym path (§2.3): the agent decides its turns"


def _sampling(cfg: dict) -> Iterator[tuple[str, str]]:
    # §2.3 / §2.5: top_k unset, no stop strings/ids; (temperature, top_p) asserted on every call.
    for key in ("top_k", "stop_token_ids", "stop_strings"):
        if _get(cfg, f"policy.generation.{key}") is not None:
            yield f"policy.generation.{key}", "must be null on the Gym path (NeMo-RL's vLLM server asserts it)"
    pinned = _get(cfg, f"{POLAR_AGENT_PATH}.backend.sampling", {}) or {}
    for key in ("temperature", "top_p"):
        want = _get(cfg, f"policy.generation.{key}")
        if key in pinned and pinned[key] != want:
            yield (
                f"{POLAR_AGENT_PATH}.backend.sampling.{key}",
                f"{pinned[key]!r} differs from policy.generation.{key}={want!r}: every call would fail",
            )


def _megatron(cfg: dict) -> Iterator[tuple[str, str]]:
    # §1.2 Megatron backend: dtensor off, optimizer null, megatron on; packing exclusive with dynamic batching.
    if _get(cfg, "policy.megatron_cfg.enabled") is not True:
        yield "policy.megatron_cfg.enabled", "must be true: these recipes train with Megatron"
    if _get(cfg, "policy.dtensor_cfg.enabled") is True:
        yield "policy.dtensor_cfg.enabled", "must be false with the Megatron backend"
    if _get(cfg, "policy.sequence_packing.enabled") and _get(cfg, "policy.dynamic_batching.enabled"):
        yield "policy.dynamic_batching.enabled", "exclusive with policy.sequence_packing.enabled"
    if _get(cfg, "loss_fn.sequence_level_importance_ratios") and _get(cfg, "loss_fn.token_level_loss"):
        yield "loss_fn.token_level_loss", "must be false with sequence_level_importance_ratios (GSPO)"
    if _get(cfg, "grpo.skip_reference_policy_logprobs_calculation") and _get(
        cfg, "loss_fn.reference_policy_kl_penalty"
    ):
        yield "grpo.skip_reference_policy_logprobs_calculation", "needs loss_fn.reference_policy_kl_penalty == 0"
    if _get(cfg, "loss_fn.force_on_policy_ratio"):
        n = (_get(cfg, "grpo.num_prompts_per_step") or 0) * (_get(cfg, "grpo.num_generations_per_prompt") or 0)
        if _get(cfg, "policy.train_global_batch_size") != n:
            yield (
                "policy.train_global_batch_size",
                f"must equal prompts x generations ({n}) with force_on_policy_ratio",
            )


def _lengths(cfg: dict) -> Iterator[tuple[str, str]]:
    total = _get(cfg, "policy.max_total_sequence_length")
    model_len = _get(cfg, "policy.generation.vllm_cfg.max_model_len")
    new = _get(cfg, "policy.generation.max_new_tokens")
    if isinstance(model_len, int) and isinstance(total, int) and model_len > total:
        yield "policy.generation.vllm_cfg.max_model_len", f"{model_len} exceeds max_total_sequence_length {total}"
    if isinstance(model_len, int) and isinstance(new, int) and new >= model_len:
        yield "policy.generation.max_new_tokens", f"{new} leaves no room for a prompt in max_model_len {model_len}"


def _async(cfg: dict) -> Iterator[tuple[str, str]]:
    # §1.1: async + Gym rejects these; §5: async GRPO with vLLM requires non-colocated generation.
    if not _get(cfg, "grpo.async_grpo.enabled"):
        return
    for key in ("grpo.use_dynamic_sampling", "grpo.reward_scaling.enabled", "grpo.reward_shaping.enabled"):
        if _get(cfg, key):
            yield key, "not supported by async GRPO with NeMo Gym"
    if _get(cfg, "data.use_multiple_dataloader"):
        yield "data.use_multiple_dataloader", "not supported by async GRPO with NeMo Gym"
    if _get(cfg, "policy.generation.colocated.enabled"):
        yield "policy.generation.colocated.enabled", "async GRPO with vLLM needs non-colocated generation"
    if not _get(cfg, "loss_fn.use_importance_sampling_correction"):
        yield "loss_fn.use_importance_sampling_correction", "async GRPO requires it (docs/guides/async-grpo.md)"


def _cluster(cfg: dict) -> Iterator[tuple[str, str]]:
    # §5 node accounting: non-colocated generation takes whole nodes of cluster.gpus_per_node GPUs.
    nodes, gpus = _get(cfg, "cluster.num_nodes"), _get(cfg, "cluster.gpus_per_node")
    if not (isinstance(nodes, int) and isinstance(gpus, int)) or nodes < 1 or gpus < 1:
        return
    train_gpus = nodes * gpus
    if _get(cfg, "policy.generation.colocated.enabled") is False:
        gen_nodes = _get(cfg, "policy.generation.colocated.resources.num_nodes") or 0
        gen_gpus = _get(cfg, "policy.generation.colocated.resources.gpus_per_node") or 0
        if nodes > 1 and gen_nodes >= 1:
            if gen_gpus != gpus:
                yield (
                    "policy.generation.colocated.resources.gpus_per_node",
                    f"must equal cluster.gpus_per_node ({gpus})",
                )
            if gen_nodes >= nodes:
                yield "policy.generation.colocated.resources.num_nodes", f"leaves no training node of {nodes}"
            train_gpus = (nodes - gen_nodes) * gpus
        else:
            train_gpus -= gen_gpus
    mp = 1
    for key in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size"):
        mp *= _get(cfg, f"policy.megatron_cfg.{key}") or 1
    if train_gpus > 0 and train_gpus % mp:
        yield (
            "policy.megatron_cfg.tensor_model_parallel_size",
            f"TP x PP x CP = {mp} does not divide {train_gpus} GPUs",
        )
    tp = _get(cfg, "policy.generation.vllm_cfg.tensor_parallel_size") or 1
    if tp > gpus:
        yield "policy.generation.vllm_cfg.tensor_parallel_size", f"{tp} exceeds cluster.gpus_per_node ({gpus})"


def _ports(cfg: dict) -> Iterator[tuple[str, str]]:
    # §5 port layout: NeMo-RL generation HTTP [3000, 4999], Gym [5000, 5999]; they must not overlap.
    gen = (_get(cfg, "policy.generation.port_range_low"), _get(cfg, "policy.generation.port_range_high"))
    gym = (_get(cfg, "env.nemo_gym.port_range_low"), _get(cfg, "env.nemo_gym.port_range_high"))
    for name, (lo, hi) in (("policy.generation", gen), ("env.nemo_gym", gym)):
        if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
            yield f"{name}.port_range_low", f"{lo} > port_range_high {hi}"
    if all(isinstance(x, int) for x in gen + gym) and gen[0] <= gym[1] and gym[0] <= gen[1]:
        yield "env.nemo_gym.port_range_low", f"Gym ports {gym} overlap NeMo-RL's generation ports {gen}"


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
        from ..evaluators import evaluator_class

        evaluator_class(agent.evaluator.kind).parse_config(agent.evaluator.config)
    except ConfigError as exc:
        if "cannot load" not in str(exc):  # an optional extra (swebench) absent here: its config is checked on use
            yield f"{POLAR_AGENT_PATH}.evaluator", str(exc)
    paths = _get(cfg, "env.nemo_gym.config_paths") or []
    if not any("polar_agent" in str(p) for p in paths):
        yield "env.nemo_gym.config_paths", "does not name the polar_agent config (responses_api_agents/polar_agent)"


RULES: tuple[Rule, ...] = (_gym_entry_point, _sampling, _megatron, _lengths, _async, _cluster, _ports, _agent)


def check_recipe(path: str | Path, overrides: list[str] | None = None) -> list[dict[str, str]]:
    """Every problem of one recipe, as {recipe, key, message}."""
    name = Path(path).name
    try:
        cfg = resolve(apply_overrides(load_recipe(path), list(overrides or [])))
    except RecipeError as exc:
        return [{"recipe": name, "key": exc.key, "message": exc.message}]
    found: list[tuple[str, str]] = list(schema_errors(cfg))
    for rule in RULES:
        found += list(rule(cfg))
    seen: set[tuple[str, str]] = set()
    out = []
    for key, message in found:
        if (key, message) not in seen:
            seen.add((key, message))
            out.append({"recipe": name, "key": key, "message": message})
    return out


def recipe_paths(paths: list[str] | None = None) -> list[Path]:
    if paths:
        return [Path(p) for p in paths]
    return sorted(RECIPES_DIR.glob("*.yaml"))


def check(paths: list[str] | None = None, overrides: list[str] | None = None) -> dict[str, Any]:
    """`polar recipes check`: the report as one JSON-able object."""
    recipes = recipe_paths(paths)
    overrides = SAMPLE_OVERRIDES + list(overrides or []) if overrides is not None else list(SAMPLE_OVERRIDES)
    errors = [e for r in recipes for e in check_recipe(r, overrides)]
    return {
        "recipes": [r.name for r in recipes],
        "count": len(recipes),
        "overrides": overrides,
        "errors": errors,
        "ok": not errors and bool(recipes),
    }
