"""The package installs as its metadata says: every extra resolves, with pip's own resolver against PyPI, on each
Python the package declares (its classifiers, within requires-python) that this machine has; an extra whose project
wants a newer Python than ours says so in its marker, at exactly the version that project declares."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from nemo_polar.paths import ROOT

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
EXTRAS: dict[str, list[str]] = PROJECT["optional-dependencies"]
CLASSIFIED = sorted(
    (
        c.rsplit(" :: ", 1)[1]
        for c in PROJECT["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    ),
    key=lambda v: int(v.split(".")[1]),
)
PYTHON_BOUND = re.compile(r"""python_full_version\s*>=\s*['"]([\d.]+)['"]""")


def pypi_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
        return True
    except OSError:
        return False


needs_pypi = pytest.mark.skipif(not pypi_reachable(), reason="pypi.org is not reachable from here")


def interpreter(minor: str) -> str | None:
    """A Python `minor` (3.12) on this machine: pyenv's newest patch release of it, else `python3.12` on PATH."""
    versions = Path(os.environ.get("PYENV_ROOT", "~/.pyenv")).expanduser() / "versions"
    found = sorted(versions.glob(f"{minor}.*/bin/python"), key=lambda p: [int(x) for x in p.parts[-3].split(".")])
    return str(found[-1]) if found else shutil.which(f"python{minor}")


def pip(*args: str) -> list[str]:
    """This environment's pip, against PyPI alone: no configuration file, no find-links or mirrors of this machine
    (the certificate bundle it is told to trust is kept)."""
    cert = ["--cert", os.environ["PIP_CERT"]] if os.environ.get("PIP_CERT") else []
    return [sys.executable, "-m", "pip", "--disable-pip-version-check", *cert, *args]


def pip_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PIP_")} | {"PIP_CONFIG_FILE": os.devnull}


def package_copy(folder: Path) -> Path:
    """The package's metadata without its code: what pip resolves is the same, and nothing is built in the tree."""
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, folder / name)
    (folder / "nemo_polar").mkdir()
    (folder / "nemo_polar" / "__init__.py").touch()
    return folder


def test_the_classifiers_name_every_python_from_the_one_required():
    """The declared Pythons: each minor from requires-python's floor up, none below it."""
    floor = int(re.fullmatch(r">=3\.(\d+)", PROJECT["requires-python"]).group(1))
    minors = [int(v.split(".")[1]) for v in CLASSIFIED]
    assert minors == list(range(floor, floor + len(minors))) and len(minors) >= 3, CLASSIFIED
    assert "License ::" not in " ".join(PROJECT["classifiers"])  # the SPDX expression says it (PEP 639)
    assert PROJECT["license"] == "Apache-2.0" and PROJECT["license-files"] == ["LICENSE"]


@needs_pypi
def test_every_extra_resolves_on_each_declared_python(tmp_path):
    """`pip install nemo_polar[every extra]` resolved (a dry run) by pip for each declared Python found here, side by
    side; each extra's requirement whose marker holds there is in what pip would install. A set that resolves
    whole resolves in any part, so every extra alone installs too."""
    source = package_copy(tmp_path)
    found = {minor: interpreter(minor) for minor in CLASSIFIED}
    if not any(found.values()):
        pytest.skip(f"none of the declared Pythons ({', '.join(CLASSIFIED)}) is on this machine")
    runs = {}
    for minor, python in found.items():
        if python is None:
            continue
        report = tmp_path / f"report-{minor}.json"
        argv = pip("--python", python, "install", "--dry-run", "--ignore-installed", "--quiet")
        argv += ["--index-url", "https://pypi.org/simple", "--report", str(report), f"{source}[{','.join(EXTRAS)}]"]
        runs[minor] = (python, report, subprocess.Popen(argv, env=pip_env(), stderr=subprocess.PIPE, text=True))
    problems = []
    for minor, (python, report, run) in runs.items():
        _, err = run.communicate(timeout=540)
        if run.returncode != 0:
            problems.append(f"Python {minor} ({python}): pip exited {run.returncode}: {err[-3000:]}")
            continue
        installs = {canonicalize_name(i["metadata"]["name"]): i for i in json.loads(report.read_text())["install"]}
        full = subprocess.run(
            [python, "-c", "import platform; print(platform.python_version())"], capture_output=True, text=True
        ).stdout.strip()
        for extra, requirements in EXTRAS.items():
            for line in requirements:
                req = Requirement(line)
                wanted = req.marker is None or req.marker.evaluate(
                    {"python_full_version": full, "python_version": minor, "extra": extra}
                )
                if wanted and canonicalize_name(req.name) not in installs:
                    problems.append(f"Python {minor}: {extra} asks for {line}, and pip would not install it")
                elif not wanted and canonicalize_name(req.name) in installs:
                    problems.append(f"Python {minor}: {line} would be installed although its marker says no")
    missing = [m for m, p in found.items() if p is None]
    assert not problems, "\n".join(problems)
    if missing:
        pytest.skip(f"resolved on {', '.join(runs)}; no Python {', '.join(missing)} here")


@needs_pypi
def test_an_extra_limited_to_a_newer_python_asks_for_exactly_what_its_project_declares():
    """The gym extra: NeMo Gym declares Requires-Python >=3.13.14, and the extra's marker says the same. Its wheel is
    chosen at that version and refused one patch release below (pip's --python-version, no dependencies)."""
    limited = [(extra, line) for extra, lines in EXTRAS.items() for line in lines if PYTHON_BOUND.search(line)]
    assert any(extra == "gym" for extra, _ in limited), EXTRAS["gym"]
    for extra, line in limited:
        bound = PYTHON_BOUND.search(line).group(1)
        major, minor, patch = (int(x) for x in bound.split("."))
        below = f"{major}.{minor}.{patch - 1}" if patch else f"{major}.{minor - 1}.99"
        pinned = str(Requirement(line)).split(";")[0]
        outcomes = {}
        for version in (bound, below):
            argv = pip("install", "--dry-run", "--ignore-installed", "--quiet", "--no-deps", "--only-binary=:all:")
            argv += ["--python-version", version, "--index-url", "https://pypi.org/simple", "--report", "-", pinned]
            run = subprocess.run(argv, env=pip_env(), capture_output=True, text=True, timeout=300)
            outcomes[version] = run
        assert outcomes[bound].returncode == 0, (
            f"{extra}: {pinned} on Python {bound}: {outcomes[bound].stderr[-2000:]}"
        )
        assert outcomes[below].returncode != 0 and "Requires-Python" in outcomes[below].stderr, (
            f"{extra}: {pinned} installs on Python {below} too: its marker could ask for less"
        )
