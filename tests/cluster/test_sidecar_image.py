"""docker/sidecar.Dockerfile, the image `polar.container` names, built on the tests' own Docker engine. No registry
is reachable here, so NeMo-RL's image (BASE) is stood in for by the set-up's Debian with python3, plus uv (which
NeMo-RL's image carries) and the wheels of nemo_polar's dependencies, fetched on the host by pip (UV_OPTIONS);
the harness CLIs are not installed (HARNESSES="": scripts/setup.sh's parts fetch them from the network)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib

import pytest

from nemo_polar.cluster.topology import REPO
from nemo_polar.local.docker_engine import image_name
from nemo_polar.paths import DEPS

from ..conftest import requires_docker

BASE = "polar-sidecar-base:test"
IMAGE = "polar-sidecar:test"
# Run in the image: where polar is, what it answers, what the venv holds, and the sidecar itself on its own ports.
PROBE = r"""
set -e
echo "which $(command -v polar)"
polar --help > /tmp/help && echo "help $(grep -c launch /tmp/help)"
/opt/nemo_polar/.venv/bin/python -c '
import importlib.metadata as md, json, docker, nemo_polar
from nemo_polar.config import CONF_DIR
scripts = {e.name: e.value for e in md.entry_points(group="console_scripts")}
held = {"package": nemo_polar.__file__, "conf": CONF_DIR.is_dir(), "polar": scripts.get("polar")}
print("python", json.dumps(held))'
polar launch sidecar > /tmp/refused 2>&1 || echo "refused $(tail -1 /tmp/refused)"
export SLURM_MASTER_NODE=$(hostname) POLAR_CONTROL_TOKEN=t0ken
polar launch sidecar topology.bind_host=127.0.0.1 topology.store_dir=/tmp/cluster > /tmp/sidecar.log 2>&1 &
/opt/nemo_polar/.venv/bin/python -c '
import json, time, urllib.request
def up(port):
    for _ in range(120):
        try:
            return urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).status
        except OSError:
            time.sleep(0.5)
print("health", json.dumps({"rollout": up(6001), "gateway": up(6000)}))'
"""


def _dependency_wheels(dest) -> None:
    """nemo_polar's dependencies (and its extra `docker`, its build backend) as the host's pip finds them."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    deps = project["project"]["dependencies"] + project["project"]["optional-dependencies"]["docker"]
    deps += project["build-system"]["requires"]
    done = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "-d", str(dest), *deps],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]


@requires_docker
def test_the_sidecar_image_builds_holds_polar_and_runs_the_sidecar(docker, tmp_path):
    uv = next((p for p in (DEPS / "gym" / "bin" / "uv", DEPS / "nemo_rl_gym" / "bin" / "uv") if p.exists()), None)
    if uv is None:
        pytest.skip("no uv binary here (scripts/setup.sh gym installs one)")
    base = tmp_path / "base"
    _dependency_wheels(base / "wheels")
    shutil.copy(uv, base / "uv")
    (base / "Dockerfile").write_text(
        f"FROM {image_name('bookworm-python')}\nCOPY uv /usr/local/bin/uv\nCOPY wheels /wheels\n"
    )
    built = docker.client("build", "-q", "-t", BASE, str(base), timeout=300)
    assert built.returncode == 0, built.stderr.decode()[-2000:]
    args = {"BASE": BASE, "UV_OPTIONS": "--no-index --find-links /wheels", "HARNESSES": ""}
    argv = ["build", "-f", str(REPO / "docker" / "sidecar.Dockerfile"), "-t", IMAGE, str(REPO)]
    argv[1:1] = [x for k, v in args.items() for x in ("--build-arg", f"{k}={v}")]
    built = docker.client(*argv, timeout=600)
    assert built.returncode == 0, (built.stdout + built.stderr).decode()[-3000:]

    ran = docker.client("run", "--rm", "--network", "none", IMAGE, "sh", "-c", PROBE, timeout=180)
    assert ran.returncode == 0, (ran.stdout + ran.stderr).decode()[-3000:]
    seen = dict(line.split(" ", 1) for line in ran.stdout.decode().splitlines() if " " in line)
    assert seen["which"] == "/usr/local/bin/polar"  # what polar.command (`polar`) finds
    assert int(seen["help"]) >= 1  # polar --help runs and lists its launch commands
    held = json.loads(seen["python"])
    assert held == {"package": "/opt/nemo_polar/nemo_polar/__init__.py", "conf": True, "polar": "nemo_polar.cli:main"}
    assert "SLURM_MASTER_NODE" in seen["refused"]  # outside ray.sub the sidecar says what it needs
    assert json.loads(seen["health"]) == {"rollout": 200, "gateway": 200}  # under it, both servers answer
    # what the build context carried: the package and what it reads, nothing built on this machine
    listed = docker.client("run", "--rm", "--network", "none", IMAGE, "ls", "-a", "/opt/nemo_polar", timeout=60)
    assert set(listed.stdout.decode().split()) >= {"nemo_polar", "conf", "gym", "recipes", "scripts", ".venv"}
    assert not {".deps", "runs", ".git", "tests"} & set(listed.stdout.decode().split())
