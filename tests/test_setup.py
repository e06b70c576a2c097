"""The set-up says what a machine lacks before it installs anything: run as a user without root, in a Debian
root filesystem that lacks bubblewrap, pip and Node.js, with no network, it names each problem and what to
do, exits 2, and leaves nothing behind."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ROOTFS = ROOT / ".deps" / "rootfs"


def setup_in(rootfs: Path, *parts: str) -> subprocess.CompletedProcess:
    argv = ["bwrap", "--bind", str(rootfs), "/", "--ro-bind", str(ROOT), "/repo", "--tmpfs", "/tmp"]
    argv += ["--proc", "/proc", "--dev", "/dev", "--unshare-all", "--uid", "1000", "--gid", "1000"]
    argv += ["--chdir", "/repo", "--setenv", "POLAR_DEPS", "/tmp/deps", "--setenv", "HOME", "/tmp"]
    argv += [
        "--setenv",
        "PATH",
        "/usr/bin:/bin",
        "bash",
        "-c",
        'bash scripts/setup.sh "$@"; rc=$?; ls -A /tmp/deps; exit $rc',
    ]
    return subprocess.run([*argv, "setup", *parts], capture_output=True, text=True, timeout=60)


needs = pytest.mark.skipif(
    not (os.path.exists("/usr/bin/bwrap") and (ROOTFS / "bookworm-python" / "bin" / "sh").exists()),
    reason="needs bubblewrap and the set-up's root filesystems (scripts/setup.sh rootfs)",
)


@needs
def test_make_runs_set_up_on_a_machine_without_root_pip_or_network_says_so_first():
    done = setup_in(ROOTFS / "bookworm-python", "run")
    assert done.returncode == 2, done.stderr
    said = done.stderr
    assert "cannot run the set-up of: project system model vllm" in said
    assert "not root: apt would install bubblewrap" in said
    assert "python3.11 has no pip" in said
    assert "nothing was installed" in said and "Traceback" not in said
    assert done.stdout.split() == []  # the deps folder is empty: no venv, no stamp


@needs
def test_the_whole_set_up_names_every_missing_interpreter_and_tool():
    done = setup_in(ROOTFS / "bookworm")
    assert done.returncode == 2, done.stderr
    said = done.stderr
    for problem in ("no python3.11", "needs Python 3.12", "needs Python 3.13", "need Node.js and npm", "slurmctld"):
        assert problem in said, problem
    assert done.stdout.split() == []


def test_an_unknown_part_is_refused():
    done = subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh"), "nope"], capture_output=True, text=True)
    assert done.returncode == 2 and "unknown part: nope" in done.stderr


@pytest.mark.parametrize(
    "script,args", [("nemo_polar/runtimes/toolchain.py", ["manifest"]), ("nemo_polar/harnesses/versions.py", ["npm"])]
)
def test_the_files_the_set_up_runs_as_scripts_run_alone(script, args, tmp_path):
    """scripts/setup.sh runs these as plain files, before any environment exists: no package import may creep in."""
    extra = [str(tmp_path)] if args == ["manifest"] else []
    done = subprocess.run(
        ["python3", "-I", str(ROOT / script), *args, *extra], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr


def test_the_toolchain_finds_the_same_dependencies_folder_as_the_package():
    from nemo_polar import paths
    from nemo_polar.runtimes import toolchain

    assert toolchain.DEPS == paths.DEPS
