"""What a harness adapter is: how to launch one agent CLI, unchanged, against the proxy.

An adapter only describes the launch (argv, environment, config files under the session's own
HOME); running it, sandboxing it and keeping its logs belong to the gateway node. Every adapter
points every model name the harness may use (sub-agents included) at the proxy with the
session's key, and turns off anything interactive or networked besides the model API.
"""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path

from .versions import PINS, Pin

ROOT = Path(__file__).resolve().parents[4]
TOOLS = Path(os.environ.get("POLAR_DEPS", ROOT / ".deps"))


@dataclass
class Launch:
    argv: list[str]
    env: dict[str, str]
    files: dict[str, str] = field(default_factory=dict)  # path relative to HOME -> content

    def write_files(self, home: Path) -> None:  # home must be absolute: harnesses run elsewhere
        for rel, content in self.files.items():
            path = home / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)


@dataclass
class Endpoint:
    """Where the harness's model API is: the proxy, with this session's key."""

    base_url: str  # http://host:port, no path
    api_key: str
    model: str = "polar"


class Harness(ABC):
    name: str
    dialects: tuple[str, ...]  # the API dialects it speaks
    # the harness's own logs and transcripts, as globs under its HOME: kept with the session's logs
    log_files: tuple[str, ...] = ()

    @property
    def pin(self) -> Pin | None:
        """The version it must be installed at (harnesses/versions.py); None: nothing to check."""
        return PINS.get(self.name)

    @abstractmethod
    def launch(self, task: str, endpoint: Endpoint, home: Path, workdir: Path, max_steps: int) -> Launch: ...

    def base_env(self, home: Path) -> dict[str, str]:
        path = f"{TOOLS / 'node' / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}"
        return {"HOME": str(home), "PATH": path, "LANG": "C.UTF-8", "TERM": "dumb", "NO_COLOR": "1", "CI": "1"}


def dump(obj: object) -> str:
    return json.dumps(obj, indent=2)
