"""The pinned version of every harness. Each adapter states its own (`pin = Pin(...)` in its class, the
one place); scripts/setup.sh installs exactly these, read here from the adapters' source, and a gateway
node checks each harness against them before its first session (`install.check_install`).

Standard library only, so set-up can read the pins before any environment exists:

    python3 nemo_polar/harnesses/versions.py npm              # pkg@version ...
    python3 nemo_polar/harnesses/versions.py pip mini_swe_agent  # pkg==version ...

A user who runs another version than the pinned one names it in POLAR_HARNESS_VERSIONS
(`codex=0.170.0 aider=0.87.0`): set-up installs that one instead (its stamps notice), and a task that sets
`harness.version` to it passes the node's check.
"""

from __future__ import annotations

import ast
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path


@dataclass(frozen=True)
class Pin:
    package: str  # the npm package or the Python distribution whose version is checked
    version: str
    # "npm": in the toolchain's node/ (or its <folder>/, a Node.js of its own); "pip": in the site-packages of the
    # toolchain's <folder>/ Python
    kind: str
    folder: str = ""
    setup: str = ""  # the scripts/setup.sh part that installs it (default: node for npm, else the folder)
    extra: tuple[str, ...] = ()  # installed beside it, pinned too (pip requirement strings)

    @property
    def part(self) -> str:
        """The scripts/setup.sh part that installs it."""
        return self.setup or ("node" if self.kind == "npm" and not self.folder else self.folder)

    @property
    def spec(self) -> str:
        return f"{self.package}@{self.version}" if self.kind == "npm" else f"{self.package}=={self.version}"


ADAPTERS = Path(__file__).resolve().parent


def read_pins(folder: Path = ADAPTERS) -> dict[str, Pin]:
    """harness name -> its `pin`, from the source of the adapters in `folder` (without importing them)."""
    pins: dict[str, Pin] = {}
    for path in sorted(folder.glob("[!_]*.py")):
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.ClassDef):
                continue
            values = {
                t.id: item.value
                for item in node.body
                if isinstance(item, ast.Assign)
                for t in item.targets
                if isinstance(t, ast.Name)
            }
            call = values.get("pin")
            if isinstance(call, ast.Call) and isinstance(values.get("name"), ast.Constant):
                args = [ast.literal_eval(a) for a in call.args]
                kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
                pins[values["name"].value] = Pin(*args, **kwargs)
    return pins


PINS = read_pins()
ASKED = "POLAR_HARNESS_VERSIONS"


def asked(text: str | None = None) -> dict[str, str]:
    """harness -> the version a user asks set-up for instead of its pin (`codex=0.170.0 aider=0.87.0`)."""
    text = os.environ.get(ASKED, "") if text is None else text
    out: dict[str, str] = {}
    for item in text.replace(",", " ").split():
        name, sep, version = item.partition("=")
        if not sep or not version or name not in PINS:
            known = ", ".join(PINS)
            raise SystemExit(f"{ASKED}: {item!r} is not <harness>=<version> with a harness of {known}")
        out[name] = version
    return out


def specs(kind: str, harness: str | None = None) -> list[str]:
    """What set-up installs: each pin, at the version asked for where one is."""
    versions = asked()
    pins = {n: replace(p, version=versions.get(n, p.version)) for n, p in PINS.items()}
    if harness is not None:
        pin = pins[harness]
        return [pin.spec, *pin.extra]
    return [p.spec for p in pins.values() if p.kind == kind and not p.folder]  # a folder of its own: its own part


if __name__ == "__main__":
    print(" ".join(specs(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)))
