"""Version checks: every bundled harness has one pin, read from installed package metadata; a missing or
different install is refused with a message naming the harness, both versions and the fix, and a
session whose harness is not installed comes back masked with that cause, not with a reward of 0."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from nemo_polar.contracts import DispatchRequest, SessionResult, TaskSpec
from nemo_polar.harnesses import HARNESSES, install
from nemo_polar.harnesses.install import HarnessNotInstalled, check_install, installed_version
from nemo_polar.harnesses.pi import Pi
from nemo_polar.harnesses.shell import Shell
from nemo_polar.harnesses.versions import PINS, Pin
from nemo_polar.runtimes import toolchain
from nemo_polar.server.gateway.pipeline import Pipeline
from nemo_polar.server.gateway.stages import HarnessStages
from nemo_polar.states import SessionState

VERSIONS = Path(install.__file__).with_name("versions.py")


@pytest.fixture(autouse=True)
def fresh_cache():
    install._checked.clear()
    yield
    install._checked.clear()


def npm_package(deps: Path, package: str, version: str, node: str = "node") -> None:
    folder = deps / node / "lib/node_modules" / package
    folder.mkdir(parents=True)
    (folder / "package.json").write_text(json.dumps({"name": package, "version": version}))


def venv_package(deps: Path, venv: str, dist: str, version: str) -> None:
    (deps / venv / "bin").mkdir(parents=True)
    (deps / venv / "bin/python3").touch()
    info = deps / venv / f"lib/python3.12/site-packages/{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")


def test_set_up_installs_every_pinned_harness():
    assert set(PINS) == {name for name in HARNESSES if HARNESSES[name].pin is not None}
    # what set-up reads from the adapters' source is what the classes say
    assert all(HARNESSES[name].pin == pin for name, pin in PINS.items())
    assert Pi().pin == PINS["pi"] and Shell(command="true").pin is None


def test_setup_reads_the_same_pins():
    def specs(*args: str) -> str:
        return subprocess.run([sys.executable, VERSIONS, *args], capture_output=True, text=True, check=True).stdout

    npm = specs("npm").split()
    assert npm == [f"{p.package}@{p.version}" for p in PINS.values() if p.kind == "npm" and not p.folder]
    assert specs("npm", "openclaw").split()[0] == f"openclaw@{PINS['openclaw'].version}"  # its own part, own Node
    assert "@openai/codex@0.169.0" in npm
    assert specs("pip", "mini_swe_agent").split() == ["mini-swe-agent==2.4.6", "litellm==1.106.2", "mcp==2.3.0"]
    assert specs("pip", "openhands").split()[0] == f"openhands-sdk=={PINS['openhands'].version}"


def test_the_right_versions_pass(tmp_path):
    for pin in PINS.values():
        if pin.kind == "npm":
            npm_package(tmp_path, pin.package, pin.version, pin.folder or "node")
        else:
            venv_package(tmp_path, pin.folder, pin.package, pin.version)
    for name, cls in HARNESSES.items():
        harness = Pi() if name == "pi" else Shell(command="true") if name == "shell" else cls()
        assert check_install(harness, tmp_path) == (PINS[name].version if name in PINS else "")


def test_a_wrong_npm_version_names_harness_versions_and_fix(tmp_path):
    npm_package(tmp_path, "@openai/codex", "0.1.0")
    with pytest.raises(HarnessNotInstalled) as err:
        check_install(HARNESSES["codex"](), tmp_path)
    message = str(err.value)
    assert "'codex'" in message and "0.169.0" in message and "found 0.1.0" in message
    assert "scripts/setup.sh node" in message


def test_a_missing_venv_names_its_setup_part(tmp_path):
    with pytest.raises(HarnessNotInstalled, match=r"'openhands'.*found nothing.*scripts/setup.sh openhands"):
        check_install(HARNESSES["openhands"](), tmp_path)
    venv_package(tmp_path, "python", "mini-swe-agent", "2.0.0")  # the toolchain's Python 3.11
    with pytest.raises(HarnessNotInstalled, match=r"'mini_swe_agent'.*2\.4\.6.*found 2\.0\.0.*setup.sh mini"):
        check_install(HARNESSES["mini_swe_agent"](), tmp_path)


def test_dist_names_are_matched_normalised(tmp_path):
    venv_package(tmp_path, "v", "Some_Dist.Name", "1.2")
    assert installed_version(Pin("some-dist-name", "1.2", "pip", "v"), tmp_path) == "1.2"
    assert installed_version(Pin("other", "1.2", "pip", "v"), tmp_path) is None


def test_a_success_is_cached_and_a_failure_is_not(tmp_path):
    pi = Pi()
    with pytest.raises(HarnessNotInstalled):
        check_install(pi, tmp_path)
    npm_package(tmp_path, PINS["pi"].package, PINS["pi"].version)
    assert check_install(pi, tmp_path) == PINS["pi"].version  # fixed without a restart
    (tmp_path / "node").rename(tmp_path / "gone")
    assert check_install(pi, tmp_path) == PINS["pi"].version  # not read again


def test_a_session_whose_harness_is_not_installed_is_masked(proxy, tmp_path, monkeypatch):
    monkeypatch.setattr(toolchain, "TOOLS", tmp_path / "no-deps")
    results: list[SessionResult] = []

    async def on_result(result: SessionResult) -> None:
        results.append(result)

    async def main() -> None:
        stages = HarnessStages(proxy.proxy, proxy.url, tmp_path / "node", "node-1", on_result)
        task = TaskSpec(task_id="t1", instruction="Say hello.", harness={"name": "pi", "max_steps": 2})
        request = DispatchRequest(session_id="s-1", task=task, callback_url="http://unused")
        async with Pipeline(1, 1, 1, 1, stages) as pipeline:
            await pipeline.submit(stages.job(request))

    asyncio.run(main())
    (result,) = results
    assert result.masked and result.reward is None and result.status is SessionState.ERROR
    assert "HarnessNotInstalled" in result.error and "'pi'" in result.error and "scripts/setup.sh node" in result.error
    assert "found nothing" in result.stats["evaluation"]["infrastructure_error"]
    assert result.stats["exit_code"] is None  # it never started


def test_a_version_asked_for_is_what_set_up_installs_and_the_node_checks(tmp_path):
    """`POLAR_HARNESS_VERSIONS` moves set-up's pins; `harness.version` moves the node's check to the same one."""

    def specs(env: str, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, VERSIONS, *args], capture_output=True, text=True, env={"POLAR_HARNESS_VERSIONS": env}
        )

    npm = specs("codex=0.170.0, qwen_code=0.16.0", "npm").stdout.split()
    assert "@openai/codex@0.170.0" in npm and "@qwen-code/qwen-code@0.16.0" in npm
    assert f"{PINS['pi'].package}@{PINS['pi'].version}" in npm  # the others stay at their pins
    assert specs("mini_swe_agent=2.5.0", "pip", "mini_swe_agent").stdout.split()[0] == "mini-swe-agent==2.5.0"
    bad = specs("codx=1", "npm")
    assert bad.returncode != 0 and "'codx=1'" in bad.stderr and "codex" in bad.stderr

    npm_package(tmp_path, "@openai/codex", "0.170.0")
    with pytest.raises(HarnessNotInstalled, match=r"needs @openai/codex 0\.169\.0, found 0\.170\.0"):
        check_install(HARNESSES["codex"](), tmp_path)  # the pin, unless the task asks for another
    assert check_install(HARNESSES.make("codex", {"version": "0.170.0"}), tmp_path) == "0.170.0"
    with pytest.raises(HarnessNotInstalled) as err:
        check_install(HARNESSES.make("codex", {"version": "0.171.0"}), tmp_path)
    assert "run `POLAR_HARNESS_VERSIONS=codex=0.171.0 scripts/setup.sh node`" in str(err.value)


def test_shell_has_no_version_to_set():
    with pytest.raises(Exception, match="installs no CLI"):
        HARNESSES.make("shell", {"command": "true", "version": "1.0"})
