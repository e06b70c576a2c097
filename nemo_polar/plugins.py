"""The one plug-in pattern: harnesses, runtimes, trace builders and evaluators, each a registry from
name to class.

A task names its plug-ins (`harness.name`, `runtime.kind`, `builder`, `evaluator.kind`) by a name in
the tables below or as `"package.module:Class"` for a class of your own (a subclass of the kind's
base). Classes load on first use, so an optional extra (docker, swebench) costs nothing until a task
asks for it. The tables are strings only: `contracts` checks names against them without importing a
single plug-in, so a typo is refused when the task is submitted, with the known names listed.

Adding a built-in: its module and one line in its table here (a harness also has its version pin in
`server/gateway/harnesses/versions.py`), plus its tests and docs.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .errors import UnknownPlugin

if TYPE_CHECKING:  # the bases, for types only: loading them is the registries' job
    from .evaluators.base import Evaluator
    from .harnesses.base import Harness
    from .runtimes.base import Runtime
    from .traces.builders import Builder

T = TypeVar("T")


class Registry(Mapping[str, type[T]], Generic[T]):
    """Name -> class for one kind of plug-in; `registry[name]` loads (and caches) the class, and also
    takes `"package.module:Class"`. Iterating gives the built-in names."""

    def __init__(self, kind: str, base: str, builtins: dict[str, str]):
        self.kind = kind  # "harness", ...
        self._base = base  # "module:Class", loaded with the first plug-in
        self._builtins = builtins
        self._loaded: dict[str, type[T]] = {}
        self._lock = threading.Lock()

    def check(self, name: str) -> str:
        """`name` when it is registered or has the `package.module:Class` form; never imports anything."""
        if name in self._builtins or _is_path(name):
            return name
        raise UnknownPlugin(
            f"unknown {self.kind} {name!r}: choose from {sorted(self._builtins)}, "
            "or name your own class as 'package.module:Class'"
        )

    def __getitem__(self, name: str) -> type[T]:
        cls = self._loaded.get(name)
        if cls is None:
            cls = self._load(name)
            with self._lock:
                self._loaded[name] = cls
        return cls

    def __contains__(self, name: object) -> bool:
        return name in self._builtins

    def __iter__(self) -> Iterator[str]:
        return iter(self._builtins)

    def __len__(self) -> int:
        return len(self._builtins)

    def _load(self, name: str) -> type[T]:
        where = self._builtins.get(name) or self.check(name)
        base = _import(self._base)
        try:
            cls = _import(where)
        except (ImportError, AttributeError, ValueError) as exc:
            raise UnknownPlugin(f"cannot load {self.kind} {name!r} ({where}): {exc}") from exc
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise UnknownPlugin(f"{self.kind} {where} is not a {base.__name__}")
        return cls


def _is_path(name: str) -> bool:
    module, sep, attr = name.partition(":")
    return bool(sep and module and attr.isidentifier() and all(p.isidentifier() for p in module.split(".")))


def _import(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


_HARNESSES = "nemo_polar.harnesses"
HARNESSES: Registry[Harness] = Registry(
    "harness",
    f"{_HARNESSES}.base:Harness",
    {
        "codex": f"{_HARNESSES}.codex:Codex",
        "claude_code": f"{_HARNESSES}.claude_code:ClaudeCode",
        "qwen_code": f"{_HARNESSES}.qwen_code:QwenCode",
        "gemini_cli": f"{_HARNESSES}.gemini_cli:GeminiCli",
        "pi": f"{_HARNESSES}.pi:Pi",
        "mini_swe_agent": f"{_HARNESSES}.mini_swe_agent:MiniSweAgent",
        "openhands": f"{_HARNESSES}.openhands:OpenHands",
        "shell": f"{_HARNESSES}.shell:Shell",
    },
)

_RUNTIMES = "nemo_polar.runtimes"
RUNTIMES: Registry[Runtime] = Registry(
    "runtime",
    f"{_RUNTIMES}.base:Runtime",
    {
        "local": f"{_RUNTIMES}.local:LocalRuntime",
        "docker": f"{_RUNTIMES}.docker:DockerRuntime",  # the `docker` extra
        "apptainer": f"{_RUNTIMES}.apptainer:ApptainerRuntime",
        "image": f"{_RUNTIMES}.image:ImageRuntime",  # a root filesystem folder under bubblewrap
    },
)

BUILDERS: Registry[Builder] = Registry(
    "builder",
    "nemo_polar.traces.builders:Builder",
    {
        "prefix_tree": "nemo_polar.traces.builders:PrefixTree",  # the default, first (`polar traces --builder`)
        "per_request": "nemo_polar.traces.builders:PerRequest",
    },
)

EVALUATORS: Registry[Evaluator] = Registry(
    "evaluator",
    "nemo_polar.evaluators.base:Evaluator",
    {
        "session_completed": "nemo_polar.evaluators.session_completed:SessionCompleted",
        "tests": "nemo_polar.evaluators.tests:TestsEvaluator",
        "swebench": "nemo_polar.evaluators.swebench:SwebenchEvaluator",  # the `swebench` extra
        "answer": "nemo_polar.evaluators.answer:AnswerMatches",
    },
)

__all__ = ["BUILDERS", "EVALUATORS", "HARNESSES", "RUNTIMES", "Registry"]
