"""Configuration: Hydra overrides, strict validation that names the wrong key."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ValidationError

from nemo_polar.config import ProxyConfig, load
from nemo_polar.errors import ConfigError


def test_overrides_reach_the_typed_config():
    cfg = load(ProxyConfig, "proxy", ["port=9000", "upstream.engine=nemo_rl", "+upstream.sampling.top_p=0.9"])
    assert cfg.port == 9000 and cfg.upstream.engine == "nemo_rl" and cfg.upstream.sampling == {"top_p": 0.9}


@pytest.mark.parametrize(
    "override,key",
    [
        ("upstream.engin=vllm", "upstream.engin"),
        ("upstream.engine=tgi", "upstream.engine"),
        ("limits.max_tokens=-3", "limits.max_tokens"),
        ("port=http", "port"),
    ],
)
def test_a_wrong_key_or_value_fails_with_its_name(override, key):
    with pytest.raises(ConfigError) as exc:
        load(ProxyConfig, "proxy", [override])
    assert key in str(exc.value)


def test_polar_proxy_refuses_a_typo_at_start():
    proc = subprocess.run(
        [sys.executable, "-m", "nemo_polar.cli", "proxy", "upstream.urll=http://x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "upstream.urll" in proc.stderr


# --- config groups: conf/<group>/<option>.yaml picked on the command line ---------------------------------------


def test_defaults_keep_their_values():
    from nemo_polar.cli.up import UpConfig
    from nemo_polar.server.gateway.node import GatewayConfig

    assert load(ProxyConfig, "proxy", []) == ProxyConfig()
    up = load(UpConfig, "up", [])
    assert up.dataset.path == "bundled" and up.dataset.limit == 2 and up.harness is None and len(up.harnesses) == 4
    assert up.proxy.port == 0 and up.proxy.limits.max_tokens == 64 and up.proxy.upstream.engine == "vllm"
    assert up.runtime.kind == "local" and up.builder.kind == "prefix_tree" and up.evaluator.kind == "tests"
    assert load(UpConfig, "up", ["dataset=smoke"]).dataset.path == "conf/datasets/smoke.jsonl"
    gw = load(GatewayConfig, "gateway", [])
    assert gw.proxy.store.path == "runs/node/records.sqlite" and gw.node.capacity.run == 8


@pytest.mark.parametrize("engine", ["vllm", "sglang", "nemo_rl"])
def test_backend_group_selects_the_engine(engine):
    from nemo_polar.cli.up import UpConfig

    proxy = load(ProxyConfig, "proxy", [f"backend={engine}"])
    up = load(UpConfig, "up", [f"backend={engine}"])
    assert proxy.upstream.engine == engine == up.proxy.upstream.engine
    pinned = {"temperature": 1.0, "top_p": 1.0} if engine == "nemo_rl" else {}
    assert proxy.upstream.sampling == pinned == up.proxy.upstream.sampling


def test_groups_reach_polar_up_and_the_gateway(tmp_path):
    from nemo_polar.cli.up import UpConfig, tasks
    from nemo_polar.server.gateway.node import GatewayConfig

    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"instruction": "hi"}\n')
    up = load(UpConfig, "up", [f"dataset={rows}", "harness=qwen_code", "builder=per_request", "evaluator=tests"])
    (spec,) = tasks(up)
    assert spec.harness.name == "qwen_code" and spec.builder == "per_request" and spec.evaluator.kind == "tests"
    assert load(UpConfig, "up", ["runtime=docker", "runtime.image=python:3.11"]).runtime.kind == "docker"
    assert load(UpConfig, "up", ["dataset=bundled"]).dataset.path == "bundled"
    gw = load(GatewayConfig, "gateway", ["proxy=cluster", "backend=nemo_rl"])
    assert gw.proxy.host == "0.0.0.0" and gw.proxy.upstream.engine == "nemo_rl"
    assert load(ProxyConfig, "proxy", ["proxy=cluster"]).host == "0.0.0.0"


@pytest.mark.parametrize(
    "override,key",
    [
        ("backend=tgi", "backend"),
        ("backend.engin=vllm", "backend.engin"),
        ("+backend.enigne=vllm", "backend.enigne"),
        ("harness.nmae=codex", "harness.nmae"),
        ("runtime.kind=k8s", "runtime.kind"),
        ("+runtime.imagee=python:3.11", "runtime.imagee"),
        ("builder.kind=linear", "builder.kind"),
        ("evaluator.kidn=tests", "evaluator.kidn"),
        ("dataset.fromat=swe", "dataset.fromat"),
        ("proxy.upstream.timout_s=3", "proxy.upstream.timout_s"),
    ],
)
def test_a_wrong_group_key_fails_with_its_name(override, key):
    from nemo_polar.cli.up import UpConfig

    with pytest.raises(ConfigError) as exc:
        load(UpConfig, "up", [override])
    assert key in str(exc.value)


@pytest.mark.parametrize(
    "group,model",
    [
        ("harness", "nemo_polar.contracts:HarnessSpec"),
        ("runtime", "nemo_polar.runtimes.spec:RuntimeSpec"),
        ("evaluator", "nemo_polar.contracts:EvaluatorSpec"),
        ("builder", "nemo_polar.cli.up:BuilderConfig"),
        ("dataset", "nemo_polar.cli.up:DatasetConfig"),
        ("backend", "nemo_polar.config:BackendConfig"),
        ("topology", "nemo_polar.cluster.topology:TopologyConfig"),
    ],
)
def test_every_group_option_validates(group, model):
    import importlib

    from omegaconf import OmegaConf

    from nemo_polar.config import CONF_DIR

    module, name = model.split(":")
    cls = getattr(importlib.import_module(module), name)
    options = sorted((CONF_DIR / group).glob("*.yaml"))
    assert options
    for path in options:
        data = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
        if group == "runtime" and data.get("kind") != "local" and not data.get("image"):
            data["image"] = "/rootfs/task" if data["kind"] == "image" else "example:latest"  # on the command line
        if group == "dataset" and data["path"] is None:
            data["path"] = "rows.jsonl"  # `dataset=rows.jsonl` sets it
        if group == "harness" and data["name"] == "shell":
            with pytest.raises(ValidationError, match="needs `command`"):
                cls.model_validate(data)  # required on the command line too
            data["command"] = "true"
        cls.model_validate(data)
        if group == "evaluator":
            from nemo_polar.evaluators import EVALUATORS

            try:
                EVALUATORS[data["kind"]].parse_settings(data["config"])
            except ConfigError as exc:
                assert "cannot load" in str(exc)  # an optional extra not installed here


def test_every_polar_command_with_config_refuses_a_typo():
    for argv in (["up", "harness.nmae=x"], ["serve-gateway", "node.nod_id=x"], ["serve-rollout", "prot=1"]):
        proc = subprocess.run(
            [sys.executable, "-m", "nemo_polar.cli", *argv], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 2 and argv[1].split("=")[0] in proc.stderr, (argv, proc.stderr)


def test_a_runtime_block_is_whole_once_its_rows_complete_it(tmp_path):
    """`runtime=docker` with no image loads (a Harbor task brings its build, a SWE row its image); rows that bring
    neither are refused before anything runs, naming what is missing."""
    from nemo_polar.cli.up import UpConfig, tasks

    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"instruction": "hi"}\n')
    up = load(UpConfig, "up", ["runtime=docker", f"dataset={rows}"])
    with pytest.raises(ConfigError, match="runtime.image"):
        tasks(up, tmp_path)


# --- keys only the settings models know: no `+` needed ----------------------------------------------------------


def test_a_key_the_file_does_not_set_needs_no_plus():
    """`conf/` need not list every key: a plain `key=value` sets one only the model (or a plug-in's settings)
    has, as Hydra's `+key=value` would; `+` is still taken."""
    from nemo_polar.cli.up import UpConfig
    from nemo_polar.learn.config import LearnConfig
    from nemo_polar.server.rollout.service import RolloutConfig

    up = load(UpConfig, "up", ["runtime.commit=abc", "runtime.limits.memory=1g", "harness=pi", "harness.max_steps=7"])
    assert up.runtime.commit == "abc" and up.runtime.options["limits"] == {"memory": "1g"}
    assert up.harness is not None and up.harness.max_steps == 7
    assert load(LearnConfig, "learn", ["model=/weights"]).model == "/weights"
    assert load(RolloutConfig, "rollout", ["limits.max_depth=10"]).limits.max_depth == 10
    assert load(RolloutConfig, "rollout", ["+limits.max_depth=11"]).limits.max_depth == 11


def test_a_key_no_model_has_is_still_refused_by_its_name():
    from nemo_polar.cli.up import UpConfig
    from nemo_polar.server.rollout.service import RolloutConfig

    for config, model, override in (
        ("up", UpConfig, "budget.cals=3"),
        ("up", UpConfig, "runtime.commti=abc"),
        ("rollout", RolloutConfig, "limits.max_dpeth=10"),
        ("up", UpConfig, "harness.max_steps=7"),  # no harness picked: Hydra says so
    ):
        with pytest.raises(ConfigError) as exc:
            load(model, config, [override])
        assert override.split("=")[0] in str(exc.value), override
