"""The pinned version of every harness: the one place. scripts/setup.sh installs exactly these and a
gateway node checks each harness against them before its first session (`install.check_install`).

Standard library only, so set-up can read it before any environment exists:

    python3 nemo_polar/harnesses/versions.py npm              # pkg@version ...
    python3 nemo_polar/harnesses/versions.py pip mini_swe_agent  # pkg==version ...
"""

from __future__ import annotations

import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Pin:
    package: str  # the npm package or the Python distribution whose version is checked
    version: str
    kind: str  # "npm": in the toolchain's node/; "pip": in the site-packages of the toolchain's <folder>/ Python
    folder: str = ""
    setup: str = ""  # the scripts/setup.sh part that installs it (default: node for npm, else the folder)
    extra: tuple[str, ...] = ()  # installed beside it, pinned too (pip requirement strings)

    @property
    def part(self) -> str:
        """The scripts/setup.sh part that installs it."""
        return self.setup or ("node" if self.kind == "npm" else self.folder)

    @property
    def spec(self) -> str:
        return f"{self.package}@{self.version}" if self.kind == "npm" else f"{self.package}=={self.version}"


PINS: dict[str, Pin] = {
    "codex": Pin("@openai/codex", "0.169.0", "npm"),
    # the newest releases of these two need node >= 22; these are the newest that run on node 20
    "claude_code": Pin("@anthropic-ai/claude-code", "2.1.197", "npm"),
    "qwen_code": Pin("@qwen-code/qwen-code", "0.15.10", "npm"),
    "pi": Pin("@mariozechner/pi-coding-agent", "0.73.1", "npm"),
    "gemini_cli": Pin("@google/gemini-cli", "0.61.0", "npm"),
    # litellm needs mcp, or a run retries forever on "No module named 'mcp'"
    "mini_swe_agent": Pin("mini-swe-agent", "2.4.6", "pip", "python", "mini", ("litellm==1.106.2", "mcp==2.3.0")),
    "openhands": Pin(
        "openhands-sdk", "1.34.0", "pip", "openhands", extra=("openhands-tools==1.34.0", "litellm==1.106.2")
    ),
}


def specs(kind: str, harness: str | None = None) -> list[str]:
    if harness is not None:
        pin = PINS[harness]
        return [pin.spec, *pin.extra]
    return [p.spec for p in PINS.values() if p.kind == kind]


if __name__ == "__main__":
    print(" ".join(specs(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)))
