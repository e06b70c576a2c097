"""`polar launch direct`: NeMo-RL's own launch of a recipe without Slurm. The command line it builds is read by
NeMo-RL's entry point's own argument parser (its `parse_args`, from the checkout) and what that parser hands
NeMo-RL's loader passes NeMo-RL's validation; `--run` executes exactly that line."""

from __future__ import annotations

import argparse
import ast
import json
import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path
from unittest import mock

from nemo_polar.cluster.topology import REPO
from nemo_polar.recipes.check import check_recipes

from ..conftest import NEMO_RL, nemo_rl_served, requires_nemo_rl

RECIPE = REPO / "recipes" / "grpo-qwen3.5-4b-2n8g-megatron-polar-codex.yaml"
OVERRIDES = ["cluster.num_nodes=1", "cluster.gpus_per_node=8", "grpo.max_num_steps=3"]


def _direct(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "nemo_polar.cli", "launch", "direct", "--recipe", str(RECIPE), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)


def entry_point_reads(entry: Path, args: list[str]) -> tuple[str, list[str]]:
    """(config, overrides) as the entry point's own `parse_args` reads `args`: that function of its source, run
    alone (the module's imports are NeMo-RL's training stack, which this machine's Python cannot load)."""
    tree = ast.parse(entry.read_text())
    (parse_args,) = (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "parse_args")
    namespace: dict = {"argparse": argparse}
    exec(compile(ast.Module([parse_args], []), str(entry), "exec"), namespace)
    with mock.patch.object(sys, "argv", [str(entry), *args]):
        parsed, overrides = namespace["parse_args"]()
    return parsed.config, overrides


def test_the_command_runs_nemo_rls_gym_entry_point_on_the_recipe():
    done = _direct("--no-check", "--json", "nemo_rl.dir=/opt/nemo-rl", *OVERRIDES)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    words = shlex.split(out["command"])
    assert words[:3] == ["cd", "/opt/nemo-rl", "&&"] and out["cwd"] == "/opt/nemo-rl"
    env = dict(w.split("=", 1) for w in words[3:6])
    assert env["NEMO_RL_DIR"] == "/opt/nemo-rl" and env["POLAR_ROLLOUT_URL"] == "http://$(hostname):6001"
    assert (Path(env["NEMO_GYM_EXTRA_ROOTS"]) / "responses_api_agents/polar_agent/configs/polar_agent.yaml").is_file()
    assert (
        words[6:]
        == out["argv"]
        == ["uv", "run", "examples/nemo_gym/run_grpo_nemo_gym.py", "--config", str(RECIPE)] + OVERRIDES
    )


@requires_nemo_rl
def test_nemo_rls_entry_point_reads_the_line_and_its_loader_accepts_it():
    out = json.loads(_direct("--no-check", "--json", f"nemo_rl.dir={NEMO_RL.dir}", *OVERRIDES).stdout)
    entry = NEMO_RL.dir / out["argv"][2]
    config, overrides = entry_point_reads(entry, out["argv"][3:])
    assert (config, overrides) == (str(RECIPE), OVERRIDES)
    overrides += ["env.nemo_gym.polar_agent.responses_api_agents.polar_agent.rollout_url=http://gpu-1:6001"]
    assert check_recipes([(Path(config), overrides)], nemo_rl_served()) == [[]]
    typo = check_recipes([(Path(config), [*overrides, "grpo.max_num_stpes=3"])], nemo_rl_served())
    assert typo[0] and "max_num_stpes" in json.dumps(typo), typo


def test_run_executes_that_line(tmp_path):
    """--run in a checkout whose `uv` records what it was given: the directory, our variables, the arguments."""
    checkout, bin_dir, seen = tmp_path / "nemo-rl", tmp_path / "bin", tmp_path / "seen.json"
    checkout.mkdir()
    bin_dir.mkdir()
    uv = bin_dir / "uv"
    record = "import json, os, sys; json.dump({'cwd': os.getcwd(), 'argv': sys.argv[1:], 'env': dict(os.environ)}, "
    uv.write_text(f"#!{sys.executable}\n{record}open({str(seen)!r}, 'w'))\nsys.exit(3)\n")
    uv.chmod(0o755)
    env = os.environ | {"PATH": f"{bin_dir}:{os.environ['PATH']}", "POLAR_CONTROL_TOKEN": "t0ken"}
    done = _direct("--no-check", "--run", f"nemo_rl.dir={checkout}", *OVERRIDES, env=env)
    assert done.returncode == 3, done.stderr  # the entry point's exit status is the command's
    got = json.loads(seen.read_text())
    assert got["cwd"] == str(checkout) and got["argv"][:2] == ["run", "examples/nemo_gym/run_grpo_nemo_gym.py"]
    assert got["argv"][2:] == ["--config", str(RECIPE), *OVERRIDES]
    assert got["env"]["POLAR_ROLLOUT_URL"] == f"http://{socket.gethostname()}:6001"  # $(hostname), expanded
    assert got["env"]["NEMO_RL_DIR"] == str(checkout) and got["env"]["POLAR_CONTROL_TOKEN"] == "t0ken"
