"""Is a harness installed at its pinned version? A gateway node asks once per harness, at the start
of the first RUN that uses it; a missing or different install fails the session as an
infrastructure error (masked), never as a reward of 0.

Versions are read from the installed package metadata in the harness toolchain (npm `package.json`, the
dist-info in its Python's site-packages),
not from `--version`, which writes into HOME for some CLIs and starts a whole node runtime.
"""

from __future__ import annotations

import json
import re
import threading
from importlib import metadata
from pathlib import Path

from ..errors import HarnessNotInstalled
from ..runtimes import toolchain
from . import base
from .versions import ASKED, Pin

__all__ = ["HarnessNotInstalled", "check_install", "installed_version", "where"]


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def where(pin: Pin, tools: Path) -> Path:
    if pin.kind == "npm":
        return tools / (pin.folder or "node") / "lib" / "node_modules" / pin.package / "package.json"
    return tools / pin.folder


def installed_version(pin: Pin, tools: Path | None = None) -> str | None:
    """The installed version of `pin.package` in the toolchain `tools`, or None when it is not there."""
    path = where(pin, tools or toolchain.TOOLS)
    if pin.kind == "npm":
        try:
            return str(json.loads(path.read_text())["version"])
        except (OSError, ValueError, KeyError):
            return None
    if not (path / "bin" / "python3").exists():
        return None
    site = [str(p) for p in path.glob("lib/python3*/site-packages")]
    for dist in metadata.distributions(path=site):
        if _normal(dist.metadata["Name"] or "") == _normal(pin.package):
            return dist.version
    return None


_checked: dict[tuple[str, str, Path], str] = {}
_lock = threading.Lock()


def check_install(harness: base.Harness, tools: Path | None = None) -> str:
    """The harness's installed version, once it matches its pin (at `harness.version` where set); raises
    HarnessNotInstalled, naming the harness, both versions and the set-up command, otherwise. A harness with no
    pin (`shell`) passes as "". Successes are cached for the process; failures are checked again next time, so a
    node picks up a fixed install without a restart."""
    pin = harness.wanted
    if pin is None:
        return ""
    tools = tools or toolchain.TOOLS
    key = (harness.name, pin.version, tools)
    with _lock:
        if key in _checked:
            return _checked[key]
    found = installed_version(pin, tools)
    if found != pin.version:
        state = f"found {found}" if found else "found nothing"
        asked = "" if pin == harness.pin else f"{ASKED}={harness.name}={pin.version} "
        raise HarnessNotInstalled(
            f"harness {harness.name!r} needs {pin.package} {pin.version}, {state} at {where(pin, tools)}; "
            f"run `{asked}scripts/setup.sh {pin.part}`"
        )
    with _lock:
        _checked[key] = found
    return found
