"""`polar recipes check`: every recipe passes NeMo-RL's own validation (its loader, `MasterConfig`, its
vLLM config type, the Gym entry point's checks), and what NeMo-RL rejects is reported by key. These run
NeMo-RL's code from the checkout NEMO_RL_DIR names (CI: ../shared/upstream/nemo-rl)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from nemo_polar.recipes.check import POLAR_AGENT_PATH, RECIPES_DIR, SEAM, PolarAgentConfig

from ..conftest import NEMO_RL, nemo_rl_served, requires_nemo_rl

BASE = RECIPES_DIR / "grpo_qwen3.5_4b_polar_swe.yaml"
VARIANT = RECIPES_DIR / "grpo-qwen3.5-4b-2n8g-megatron-polar-codex.yaml"
ASYNC = RECIPES_DIR / "grpo-qwen3.5-4b-2n8g-megatron-polar-async.yaml"
HARNESSES = ("codex", "claude_code", "qwen_code", "pi")


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nemo_polar.cli", "recipes", "check", "--json", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )


@requires_nemo_rl
def test_every_recipe_passes_nemo_rls_own_validation():
    done = _cli()
    report = json.loads(done.stdout)
    assert done.returncode == 0 and report["errors"] == [], report["errors"]
    assert report["recipes"] == len(list(RECIPES_DIR.glob("*.yaml"))) == 6 and report["ok"]
    assert report["nemo_rl"]["dir"] == str(NEMO_RL.dir)


@pytest.fixture(scope="module")
def judged(tmp_path_factory) -> dict:
    """One run of NeMo-RL's validation over the recipes and the mistakes it must catch."""
    tmp = tmp_path_factory.mktemp("recipes")
    wrong_type = tmp / "wrong_type.yaml"
    wrong_type.write_text(f"defaults: {VARIANT}\ngrpo:\n  num_prompts_per_step: many\n")
    null_turns = tmp / "null_turns.yaml"
    null_turns.write_text(f"defaults: {VARIANT}\ngrpo:\n  max_rollout_turns: null\n")
    jobs = {
        "variants": [(RECIPES_DIR / f"grpo-qwen3.5-4b-2n8g-megatron-polar-{h}.yaml", []) for h in HARNESSES],
        "missing_key": [(VARIANT, ["~policy.generation.val_top_p"])],
        "missing_vllm_key": [(VARIANT, ["~policy.generation.vllm_cfg.kv_cache_dtype"])],
        "wrong_type": [(wrong_type, [])],
        "null_turns": [(null_turns, [])],
        "typo_override": [(VARIANT, ["grpo.num_prompts_per_stpe=4"])],
        "no_gym": [(VARIANT, ["env.should_use_nemo_gym=false"])],
        "async": [(ASYNC, [])],
        "async_without_is": [(ASYNC, ["loss_fn.use_importance_sampling_correction=false"])],
    }
    flat = [job for group in jobs.values() for job in group]
    answer = nemo_rl_served().call("validate", {"recipes": [{"path": str(p), "overrides": o} for p, o in flat]})
    out, i = {}, 0
    for name, group in jobs.items():
        out[name] = answer["recipes"][i : i + len(group)]
        i += len(group)
    return out


def _keys(judged_one: dict) -> list[str]:
    return [e["key"] for e in judged_one["errors"]]


@requires_nemo_rl
def test_nemo_rl_catches_a_missing_key_a_wrong_type_and_null_turns(judged):
    assert "policy.generation.val_top_p" in _keys(judged["missing_key"][0])  # MasterConfig: a required key
    assert "policy.generation.vllm_cfg.kv_cache_dtype" in _keys(judged["missing_vllm_key"][0])  # VllmConfig
    assert "grpo.num_prompts_per_step" in _keys(judged["wrong_type"][0])
    null = judged["null_turns"][0]["errors"]
    assert [e for e in null if e["key"] == "grpo.max_rollout_turns" and "integer" in e["message"]], null
    assert judged["typo_override"][0]["errors"] and judged["typo_override"][0]["config"] is None  # its parser
    assert [e for e in judged["no_gym"][0]["errors"] if "should_use_nemo_gym" in e["key"]]  # the entry point's


@requires_nemo_rl
@pytest.mark.parametrize("index,harness", list(enumerate(HARNESSES)))
def test_each_variant_inherits_nemo_rls_swe_recipe_and_sets_its_harness(judged, index, harness):
    one = judged["variants"][index]
    cfg = one["config"]
    assert one["errors"] == []
    agent = cfg["env"]["nemo_gym"]["polar_agent"]["responses_api_agents"]["polar_agent"]
    assert agent["harness"]["name"] == harness and cfg["policy"]["model_name"] == "Qwen/Qwen3.5-4B"
    assert harness in cfg["logger"]["log_dir"]
    # what the upstream SWE recipe gives and NeMo-RL reads with []
    vllm = cfg["policy"]["generation"]["vllm_cfg"]
    assert vllm["precision"] and vllm["kv_cache_dtype"] and vllm["async_engine"] and vllm["expose_http_server"]
    loss = cfg["loss_fn"]
    assert loss["truncated_importance_sampling_type"] == "tis" and loss["truncated_importance_sampling_ratio"] == 2.0
    assert cfg["grpo"]["max_rollout_turns"] == 1 and cfg["policy"]["generation"]["val_temperature"] == 1.0
    # the pair NeMo-RL's vLLM server asserts is the pair our proxy pins
    gen = cfg["policy"]["generation"]
    assert agent["backend"]["sampling"] == {"temperature": gen["temperature"], "top_p": gen["top_p"]}
    assert cfg["policy"]["train_global_batch_size"] == 8 * 16  # force_on_policy_ratio: one step per GRPO step
    assert cfg["grpo"]["async_grpo"]["enabled"] is False  # synchronous, as in the Polar paper
    assert [] == [e for rule in SEAM for e in rule(cfg)]


@requires_nemo_rl
def test_the_async_variant_passes_async_grpo_trains_own_checks(judged):
    """NeMo-RL's `async_grpo_train` runs its config assertions on the async recipe (worker.py `_async_preflight`) and
    refuses it without importance-sampling correction."""
    one = judged["async"][0]
    assert one["errors"] == []
    cfg = one["config"]
    async_grpo = cfg["grpo"]["async_grpo"]
    assert async_grpo["enabled"] is True and async_grpo["in_flight_weight_updates"] is True
    assert async_grpo["max_trajectory_age_steps"] == 2
    assert cfg["loss_fn"]["use_importance_sampling_correction"] is True
    generation = cfg["policy"]["generation"]
    assert generation["vllm_cfg"]["async_engine"] is True and generation["colocated"]["enabled"] is False
    assert (
        generation["colocated"]["resources"] == {"gpus_per_node": 8, "num_nodes": 1}
        and cfg["cluster"]["num_nodes"] == 2
    )
    assert cfg["env"]["nemo_gym"]["polar_agent"]["responses_api_agents"]["polar_agent"]["harness"]["name"] == "codex"
    assert [] == [e for rule in SEAM for e in rule(cfg)]
    refused = judged["async_without_is"][0]["errors"]
    assert [e for e in refused if e["key"] == "<async_grpo_train>" and "Importance sampling" in e["message"]], refused


@requires_nemo_rl
def test_the_seam_checks_what_nemo_rl_cannot_know(judged):
    cfg = judged["variants"][0]["config"]
    agent = copy.deepcopy(cfg)
    node = agent["env"]["nemo_gym"]["polar_agent"]["responses_api_agents"]["polar_agent"]
    node["harness"]["max_stepz"] = 3
    node["backend"]["sampling"]["temperature"] = 0.6
    loss = copy.deepcopy(cfg)
    loss["loss_fn"]["truncated_importance_sampling_type"] = None
    found = {key for rule in SEAM for key, _ in list(rule(agent)) + list(rule(loss))}
    assert f"{POLAR_AGENT_PATH}.harness.max_stepz" in found
    assert f"{POLAR_AGENT_PATH}.backend.sampling.temperature" in found
    assert "loss_fn.truncated_importance_sampling_type" in found  # the ratio would be silently ignored


@requires_nemo_rl
def test_a_bad_recipe_fails_the_cli_by_key(tmp_path):
    done = _cli("--recipe", str(VARIANT), "grpo.seed=x")
    report = json.loads(done.stdout)
    assert done.returncode == 1 and [e for e in report["errors"] if e["key"] == "grpo.seed"], report


def test_without_nemo_rl_the_check_says_how_to_point_at_one(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("NEMO_RL_DIR", "NEMO_RL_PYTHON")}
    done = _cli(env=env)
    report = json.loads(done.stdout)
    assert done.returncode == 1 and report["nemo_rl"] is None and not report["ok"]
    assert "NEMO_RL_DIR" in report["errors"][0]["message"]


def test_the_recipe_check_knows_every_key_of_the_gym_agent_config():
    """The agent section is checked by our model without NeMo Gym installed: it must not drift from the
    agent's own config (gym/responses_api_agents/polar_agent)."""
    config = Path(__file__).resolve().parents[2] / "gym/responses_api_agents/polar_agent/configs/polar_agent.yaml"
    agent = yaml.safe_load(config.read_text())["polar_agent"]["responses_api_agents"]["polar_agent"]
    assert set(agent) - {"datasets"} <= set(PolarAgentConfig.model_fields)
