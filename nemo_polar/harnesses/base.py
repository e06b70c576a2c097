"""What a harness adapter is: how to launch one agent CLI, unchanged, against the proxy.

An adapter only describes the launch (argv, environment, config files under the session's own
HOME), in the paths its sandbox shows it (`Inside`: its HOME, its working directory, the harness
toolchain, the sandbox's own PATH); it launches nothing from outside the toolchain, so it runs the
same in any image. Running it, sandboxing it and keeping its logs belong to the gateway node. Every adapter
points every model name the harness may use (sub-agents included) at the proxy with the
session's key, and turns off anything interactive or networked besides the model API.

Each adapter owns a `Settings` model for its own options (a subclass of `HarnessSettings`): a task
gives them beside the harness's name (`{"name": "pi", "dialect": "anthropic"}`), and they are
validated when the task is submitted. Options a harness does not know are errors naming the key.
"""

from __future__ import annotations

import dataclasses
import json
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from ..config import Strict
from ..plugins import Plugin
from ..runtimes.base import Inside
from .versions import Pin


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


class HarnessSettings(Strict):
    """What every harness takes; a harness with options of its own subclasses this as its `Settings`."""

    env: dict[str, str] = Field(
        default_factory=dict,
        description="more environment for the harness (over HOME, PATH...); its own variables, the proxy's "
        "URL and the session's key among them, always win",
    )
    version: str | None = Field(
        None,
        description="the CLI version to run instead of the pinned one; the node checks the installed one "
        "against it (install it with POLAR_HARNESS_VERSIONS=<harness>=<version> scripts/setup.sh <part>)",
    )


class Harness(Plugin, ABC):
    kind = "harness"
    dialects: tuple[str, ...]  # the API dialects it speaks
    # the harness's own logs and transcripts, as globs under its HOME: kept with the session's logs
    log_files: tuple[str, ...] = ()
    Settings: ClassVar[type[HarnessSettings]] = HarnessSettings  # type: ignore[assignment]
    # the version set-up installs and a node checks (versions.py reads it from here); None: nothing to check
    pin: ClassVar[Pin | None] = None
    # what `polar runtime check` adds to its defaults to run it with no task of its own (shell: a command)
    check_options: ClassVar[Mapping[str, Any]] = {}
    # whether the harness stops itself after `max_steps` (its launch passes it on); where it does not, the proxy
    # holds its session to that many model calls (`contracts.TaskSpec.call_budget`)
    stops_at_max_steps: ClassVar[bool] = True
    # the calls it makes beside the agent's own (a session title, a topic check), by name: a text only that call's
    # request carries (its system prompt's); such a call's chain is never the one trained in the agent's place
    side_calls: ClassVar[Mapping[str, str]] = {}

    @classmethod
    def side_call(cls, request: Any) -> str | None:
        """Which of the harness's side calls `request` (a call's body as sent) is, if any."""
        if not cls.side_calls:
            return None
        text = json.dumps(request, ensure_ascii=False)[:SIDE_CALL_SCAN]
        return next((name for name, marker in cls.side_calls.items() if marker in text), None)

    @classmethod
    def name_side_calls(cls, traces: Iterable[Any], requests: Mapping[str, Any]) -> None:
        """Set `metadata["side_call"]` on each trace whose first call (`requests`: record id -> body) is one."""
        for trace in traces:
            side = cls.side_call(requests.get(trace.record_ids[0])) if trace.record_ids else None
            if side is not None:  # never trained in the agent's place (env/gym.py: primary_chain)
                trace.metadata["side_call"] = side

    settings: HarnessSettings

    @property
    def wanted(self) -> Pin | None:
        """What a node checks is installed: the pin, at the version the task asks for (`harness.version`)."""
        if self.pin is None or self.settings.version is None:
            return self.pin
        return dataclasses.replace(self.pin, version=self.settings.version)

    @abstractmethod
    def launch(self, task: str, endpoint: Endpoint, inside: Inside, max_steps: int) -> Launch:
        """argv, environment and HOME files for one session; paths as `inside` gives them."""

    def base_env(self, inside: Inside) -> dict[str, str]:
        """What every harness starts from, the task's `env` setting over it; the harness adds its own. The
        sandbox's PATH comes first (the agent's commands find the image's own tools), the toolchain's
        node last (for a CLI that starts `node` by name)."""
        path = f"{inside.path}:{inside.tools / 'node' / 'bin'}"
        base = {"HOME": str(inside.home), "PATH": path, "LANG": "C.UTF-8", "TERM": "dumb", "NO_COLOR": "1", "CI": "1"}
        return base | self.settings.env


SIDE_CALL_SCAN = 16384  # characters of a request looked at: a side call's marker is in its system prompt, first


def dump(obj: object) -> str:
    return json.dumps(obj, indent=2)
