"""`polar recipes check`: every recipe passes; a typo, a wrong type, a missing key or a bad override names its key."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nemo_polar.recipes.check import RECIPES_DIR, check, check_recipe
from nemo_polar.recipes.loader import load_recipe, resolve

VARIANT = RECIPES_DIR / "grpo-qwen3.5-4b-2n8g-megatron-polar-codex.yaml"
HARNESSES = ("codex", "claude_code", "qwen_code", "pi")


def test_every_recipe_passes():
    report = check()
    assert report["errors"] == [] and report["ok"] and report["count"] >= 5


@pytest.mark.parametrize("harness", HARNESSES)
def test_each_variant_inherits_the_base_and_sets_its_harness(harness):
    cfg = resolve(load_recipe(RECIPES_DIR / f"grpo-qwen3.5-4b-2n8g-megatron-polar-{harness}.yaml"))
    agent = cfg["env"]["nemo_gym"]["polar_agent"]["responses_api_agents"]["polar_agent"]
    assert agent["harness"]["name"] == harness and cfg["policy"]["model_name"] == "Qwen/Qwen3.5-4B"
    assert cfg["policy"]["megatron_cfg"]["enabled"] and not cfg["policy"]["dtensor_cfg"]["enabled"]
    vllm = cfg["policy"]["generation"]["vllm_cfg"]
    assert vllm["async_engine"] and vllm["expose_http_server"]
    assert agent["backend"]["sampling"] == {"temperature": 1.0, "top_p": 1.0}
    assert harness in cfg["logger"]["log_dir"]


def _write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "bad.yaml"
    path.write_text(f"defaults: {VARIANT}\n{body}")
    return path


@pytest.mark.parametrize(
    "body,key",
    [
        ("grpo:\n  num_prompts_per_stepp: 4\n", "grpo.num_prompts_per_stepp"),  # typo
        ("grpo:\n  num_prompts_per_step: many\n", "grpo.num_prompts_per_step"),  # wrong type
        ("policy:\n  precision: fp8\n", "policy.precision"),  # not an allowed value
        ("grpo:\n  max_val_samples: 16\n", "grpo.max_val_samples"),  # a Gym rule
        (
            "policy:\n  megatron_cfg:\n    tensor_model_parallel_size: 3\n",
            "policy.megatron_cfg.tensor_model_parallel_size",
        ),
        (
            "env:\n  nemo_gym:\n    polar_agent:\n      responses_api_agents:\n        polar_agent:\n"
            "          harness: {name: codex, max_stepz: 3}\n",
            "env.nemo_gym.polar_agent.responses_api_agents.polar_agent.harness.max_stepz",
        ),
        (
            "env:\n  nemo_gym:\n    polar_agent:\n      responses_api_agents:\n        polar_agent:\n"
            "          backend: {engine: nemo_rl, sampling: {temperature: 0.6, top_p: 1.0}}\n",
            "env.nemo_gym.polar_agent.responses_api_agents.polar_agent.backend.sampling.temperature",
        ),
    ],
)
def test_a_wrong_recipe_key_is_named(tmp_path, body, key):
    errors = check_recipe(_write(tmp_path, body))
    assert key in [e["key"] for e in errors], errors


def test_a_missing_required_key_is_named(tmp_path):
    errors = check_recipe(VARIANT, ["~cluster.num_nodes"])
    assert {"recipe": VARIANT.name, "key": "cluster.num_nodes", "message": "missing required key"} in errors


@pytest.mark.parametrize(
    "override,key",
    [
        ("grpo.num_prompts_per_stpe=4", "grpo.num_prompts_per_stpe"),  # change of a key the recipe lacks
        ("grpo.max_num_steps=[1,", "grpo.max_num_steps"),  # not Hydra grammar
        ("+grpo.max_num_steps=3", "grpo.max_num_steps"),  # add of an existing key
        ("~grpo.no_such_key", "grpo.no_such_key"),
        ("++grpo.max_num_stepz=3", "grpo.max_num_stepz"),  # force-add passes the parser, not the schema
        ("policy.generation.top_k=20", "policy.generation.top_k"),
    ],
)
def test_a_bad_override_is_named(override, key):
    errors = check_recipe(VARIANT, [override])
    assert key in [e["key"] for e in errors], errors


def test_defaults_chain_and_override_marker(tmp_path):
    (tmp_path / "a.yaml").write_text("grpo: {seed: 1, val_period: 5}\ndata: {train: {data_path: x}, shuffle: true}\n")
    (tmp_path / "b.yaml").write_text(
        "defaults: a.yaml\ngrpo: {seed: 2}\ndata: {_override_: true, train: {data_path: y}}\n"
    )
    cfg = resolve(load_recipe(tmp_path / "b.yaml"))
    assert cfg["grpo"] == {"seed": 2, "val_period": 5} and cfg["data"] == {"train": {"data_path": "y"}}


def test_cli_prints_one_json_object_and_fails_on_errors(tmp_path):
    ok = subprocess.run(
        [sys.executable, "-m", "nemo_polar.cli", "recipes", "check", "--json"], capture_output=True, text=True
    )
    report = json.loads(ok.stdout)
    assert ok.returncode == 0 and report["errors"] == [] and report["count"] == len(report["recipes"])
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "nemo_polar.cli",
            "recipes",
            "check",
            "--json",
            "--recipe",
            str(VARIANT),
            "grpo.seed=x",
        ],
        capture_output=True,
        text=True,
    )
    report = json.loads(bad.stdout)
    assert bad.returncode == 1 and report["errors"][0]["key"] == "grpo.seed"


def test_the_recipe_check_knows_every_key_of_the_gym_agent_config():
    """recipes/check.py validates the agent section without NeMo Gym installed: it must not drift
    from the agent's own config (gym/responses_api_agents/polar_agent)."""
    import yaml

    from nemo_polar.recipes.check import PolarAgentConfig

    config = Path(__file__).resolve().parents[1] / "gym/responses_api_agents/polar_agent/configs/polar_agent.yaml"
    agent = yaml.safe_load(config.read_text())["polar_agent"]["responses_api_agents"]["polar_agent"]
    assert set(agent) - {"datasets"} <= set(PolarAgentConfig.model_fields)
