"""What NeMo Gym asks of a server folder, checked by Gym where Gym has the check: its own data validation
passes on our servers' example files, its own collate finds their metrics current, and the example
rollouts (`python -m nemo_polar.env.examples` collects them; nothing is collected here) are what our
servers return today. Our server files carry the licence header Gym's own carry, and the READMEs list
exactly what the registries hold."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib

import pytest

from nemo_polar.env import gym as polar_gym
from nemo_polar.env.examples import (
    AGENT,
    DATA,
    EXAMPLES,
    GYM_ROOT,
    LISTS,
    PARENTS,
    SERVERS,
    GymEnv,
    collate,
    gym_environment,
    missing,
    read_rows,
    readme_lists,
)
from nemo_polar.nemo_rl import GYM_VERSIONS
from nemo_polar.paths import ROOT

NEWEST = GYM_VERSIONS[-1]
RESOURCES_CONFIG = "resources_servers/polar/configs/polar.yaml"  # the config Gym's validation message names

# Gym's `gym env test +should_validate_data=true` step, alone (the suite run before it is the servers' tests/)
VALIDATE = """
import sys
from nemo_gym.cli.env import TestConfig, _validate_data_single
for server in sys.argv[1:]:
    _validate_data_single(TestConfig(entrypoint=server, should_validate_data=True))
"""


def gym_cli(version: str, tmp_path) -> GymEnv:
    """Gym's CLI with our plugin root, no servers (collate and validation need none)."""
    if why := missing(version):
        pytest.skip(why)
    return GymEnv(version, tmp_path, gym_environment(version, tmp_path, "http://127.0.0.1:9"), [], tmp_path, tmp_path)


@pytest.mark.parametrize("version", GYM_VERSIONS, ids=lambda v: f"gym-{v}")
def test_gyms_own_data_validation_passes(version, tmp_path):
    """Gym validates resources servers only (five rows, metrics of five, five rollouts, no conflict files);
    for the agent it returns at once, and the rollout checks below hold the agent to the same counts."""
    env = gym_cli(version, tmp_path).env
    python = str(PARENTS[version] / "bin" / "python")
    done = subprocess.run(
        [python, "-c", VALIDATE, *SERVERS], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "resources_servers/polar has been successfully validated" in done.stdout


def test_gyms_collate_finds_the_metrics_current(tmp_path):
    """Gym's documented collate over the resources server's config (which declares both example datasets),
    from a folder holding our metrics where Gym writes them: Gym itself fails on any difference."""
    gym = gym_cli(NEWEST, tmp_path)
    for server in SERVERS:
        (tmp_path / server / "data").mkdir(parents=True)
        shutil.copyfile(GYM_ROOT / server / DATA["metrics"], tmp_path / server / DATA["metrics"])
    collate(gym, RESOURCES_CONFIG, tmp_path)
    assert not list(tmp_path.rglob("*conflict*"))


def trained_items(rollout: dict) -> list[dict]:
    return [i for i in rollout["response"]["output"] if i.get("generation_token_ids")]


@pytest.mark.parametrize("server", SERVERS)
def test_the_rollouts_are_what_our_servers_return(server):
    rows = read_rows(GYM_ROOT / server / DATA["rows"])
    rollouts = read_rows(GYM_ROOT / server / DATA["rollouts"])
    assert len(rows) == len(rollouts) == EXAMPLES
    assert sorted(r["_ng_task_index"] for r in rollouts) == list(range(EXAMPLES))  # one per row
    never = polar_gym.unavailable_result({}, "t", "no answer", polar_gym.FailureKind.TRANSPORT_UNREACHABLE)
    ours = set(never)  # every field a /run result of ours has
    for rollout in rollouts:
        row = rows[rollout["_ng_task_index"]]
        assert ours <= set(rollout), f"not what /run returns now: remake them ({sorted(ours - set(rollout))})"
        assert rollout["agent_ref"]["name"] == AGENT
        assert polar_gym.instruction_of(rollout) == polar_gym.instruction_of(row)  # collected over these rows
        task_id = rollout["response"]["metadata"][polar_gym.META_TASK]
        assert task_id.startswith(row["polar"]["task_id"] + "-") and rollout["polar"]["task_id"] == task_id
        assert rollout["mask_sample"] is False and rollout["instance_config"] == {"mask_sample": False}
        assert rollout["failure_kind"] is None and 0.0 <= rollout["reward"] <= 1.0
        if row["polar"].get("evaluator", {}).get("kind", "session_completed") == "session_completed":
            assert rollout["reward"] == 1.0  # the harness ran to its end
        items = trained_items(rollout)
        assert items and rollout["polar_trained_tokens"] == sum(len(i["generation_token_ids"]) for i in items)
        for item in items:
            assert item["prompt_token_ids"] and len(item["generation_log_probs"]) == len(item["generation_token_ids"])
            assert all(lp <= 0.0 for lp in item["generation_log_probs"])


# --- the server folders as Gym's own are -------------------------------------------------------------------------

GYM_HEADER_FROM = "resources_servers/example_single_tool_call/app.py"  # one of Gym's own, bundled with it
HOLDER = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"] + " contributors"


def headed_files() -> list:
    """The kinds of file Gym's servers carry the header in: Python (but an empty `__init__.py`) and pyproject.toml."""
    files = [p for p in GYM_ROOT.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    return sorted(p for p in files if (p.suffix == ".py" and p.stat().st_size) or p.name == "pyproject.toml")


def test_our_server_files_carry_gyms_header_with_our_holder():
    site = next((PARENTS[NEWEST] / "lib").glob("python3.*/site-packages"), None)
    if site is None or not (site / GYM_HEADER_FROM).is_file():
        pytest.skip(missing(NEWEST) or f"no {GYM_HEADER_FROM} in NeMo Gym {NEWEST}")
    gym_header = (site / GYM_HEADER_FROM).read_text().splitlines()[:14]
    assert gym_header[1] == "# SPDX-License-Identifier: Apache-2.0" and "limitations" in gym_header[-1]
    files = headed_files()
    assert len(files) >= 6  # each server's app.py, tests/test_app.py and pyproject.toml at least
    for path in files:
        first, *rest = path.read_text().splitlines()[:14]
        assert re.fullmatch(rf"# SPDX-FileCopyrightText: Copyright \(c\) \d{{4}} {HOLDER}", first), path
        assert rest == gym_header[1:], path


@pytest.mark.parametrize("server", list(LISTS))
def test_the_readmes_list_what_the_registries_hold(server):
    readme = (GYM_ROOT / server / "README.md").read_text()
    assert readme_lists(server) in readme, (
        f"{server}/README.md is stale: run python -m nemo_polar.env.examples --readmes"
    )
