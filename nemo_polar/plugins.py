"""The one plug-in pattern, for harnesses, runtimes, trace builders and evaluators.

Each kind is a room of its own at the top of the package (`harnesses/`, `runtimes/`, `evaluators/`,
`traces/builders.py`) with its base class (a `Plugin`), its built-ins, and its registry, declared in
the room's `__init__.py`. The built-ins are the room's classes that set a `name`, found by reading the
room's source, not by importing it: a new built-in is its module and nothing else. This module is
below the rooms and imports none of them.

A task names a plug-in by a registered name or as `"package.module:Class"` (a subclass of the kind's
base, from a module of the user's own). The plug-in's options are validated by its own `Settings`
model when the task is submitted (`Registry.validate`, with the option's path in every error), and
every kind is made the same way on a node:

    REGISTRY.make(name, options, **context)  ->  cls.make(cls.parse_settings(options), **context)

Classes load on first use, so an optional extra (docker, swebench) costs nothing until a task asks
for it; a name is checked without importing anything (`Registry.check`).
"""

from __future__ import annotations

import ast
import functools
import importlib
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar, Generic, Self, TypeVar

from pydantic import ValidationError, ValidationInfo
from pydantic_core import InitErrorDetails, PydanticCustomError

from .config import Strict
from .errors import ConfigError, UnknownPlugin, problems

STORED = {"stored": True}  # validation context for specs read back from a store: checked when submitted


def stored(info: ValidationInfo) -> bool:
    """Whether a spec is being read back from a store: its plug-ins are not loaded and checked again
    (one that has since gone does not make the store unreadable)."""
    return bool(info.context and info.context.get("stored"))


class Plugin:
    """What every plug-in shares: a `Settings` model for its own options (unknown keys are errors),
    validated at submit, and `make`, how a node builds one from its settings and the node's context."""

    kind: ClassVar[str] = "plug-in"  # "harness", "runtime", ... (set by each kind's base)
    name: ClassVar[str] = "base"

    class Settings(Strict):
        pass

    def __init__(self, settings: Any = None, **options: Any) -> None:
        """`Plugin(settings)`, its options as a dict, or as keywords: `Pi(dialect="anthropic")`."""
        if isinstance(settings, Mapping) or settings is None:
            settings = self.parse_settings({**(settings or {}), **options})
        elif not isinstance(settings, self.Settings):
            raise TypeError(f"{type(self).__name__} takes its {self.Settings.__name__}, not {settings!r}")
        self.settings = settings

    @classmethod
    def parse_settings(cls, options: Mapping[str, Any] | None) -> Any:
        """`options` as this plug-in's `Settings`; a `ConfigError` naming the plug-in and each wrong key."""
        try:
            return cls.Settings.model_validate(dict(options or {}))
        except ValidationError as exc:
            bad = "; ".join(problems(exc, whole=cls.kind, prefix=f"{cls.kind}."))
            raise ConfigError(f"{cls.kind} {cls.name!r}: {bad}") from None

    @classmethod
    def make(cls, settings: Any, **context: Any) -> Self:
        """One plug-in from its validated settings; a kind whose plug-ins need the node's context
        (a runtime: the session's folder, the proxy) takes it as keywords."""
        return cls(settings, **context)  # type: ignore[call-arg]


P = TypeVar("P", bound=Plugin)


class Registry(Mapping[str, type[P]], Generic[P]):
    """Name -> class for one kind of plug-in; `registry[name]` loads (and caches) the class, and also
    takes `"package.module:Class"`. Iterating gives the built-in names."""

    def __init__(self, kind: str, base: type[P], room: str):
        self.kind = kind  # "harness", ...
        self.base = base
        self.room = room  # the package (or module) whose classes with a `name` are the built-ins
        self._loaded: dict[str, type[P]] = {}
        self._lock = threading.Lock()

    @functools.cached_property
    def builtins(self) -> dict[str, str]:
        """name -> "module:Class" for each class of the room that sets `name = "..."`."""
        module = sys.modules[self.room]  # the room is being imported: its registry is declared there
        if hasattr(module, "__path__"):
            files = sorted(f for d in module.__path__ for f in Path(d).glob("[!_]*.py"))
            where = {f: f"{self.room}.{f.stem}" for f in files}
        else:
            where = {Path(module.__file__): self.room}
        found: dict[str, str] = {}
        for path, dotted in where.items():
            for name, cls in named_classes(path.read_text()):
                if name in found:
                    raise ValueError(f"{self.kind} {name!r} is both {found[name]} and {dotted}:{cls}")
                found[name] = f"{dotted}:{cls}"
        return found

    def check(self, name: str) -> str:
        """`name` when it is registered or has the `package.module:Class` form; never imports anything."""
        if name in self.builtins or _is_path(name):
            return name
        raise UnknownPlugin(
            f"unknown {self.kind} {name!r}: choose from {sorted(self.builtins)}, "
            "or name your own class as 'package.module:Class'"
        )

    def validate(self, name: str, options: Mapping[str, Any], *loc: str | int) -> Any:
        """`options` checked by the plug-in's own `Settings`, for a spec's validator: a `ValidationError`
        whose paths start at `loc` (`runtime.image`, `harness.dialect`), an unknown key naming the
        plug-in's settings."""
        cls = self[name]
        try:
            return cls.Settings.model_validate(dict(options))
        except ValidationError as exc:
            known = ", ".join(cls.Settings.model_fields) or "none"
            details = [
                InitErrorDetails(
                    type=PydanticCustomError(
                        "extra_forbidden", f"not a setting of {self.kind} {name!r} (its settings: {known})"
                    )
                    if e["type"] == "extra_forbidden"
                    else e["type"],
                    loc=(*loc, *e["loc"]),
                    input=e["input"],
                    ctx=e.get("ctx", {}),
                )
                for e in exc.errors()
            ]
            raise ValidationError.from_exception_data(f"{self.kind} {name}", details) from None

    def make(self, name: str, options: Mapping[str, Any] | None = None, **context: Any) -> P:
        """The plug-in `name` built from its options (validated again: this node's version may differ)."""
        cls = self[name]
        return cls.make(cls.parse_settings(options), **context)

    def __getitem__(self, name: str) -> type[P]:
        cls = self._loaded.get(name)
        if cls is None:
            cls = self._load(name)
            with self._lock:
                self._loaded[name] = cls
        return cls

    def __contains__(self, name: object) -> bool:
        return name in self.builtins

    def __iter__(self) -> Iterator[str]:
        return iter(self.builtins)

    def __len__(self) -> int:
        return len(self.builtins)

    def _load(self, name: str) -> type[P]:
        where = self.builtins.get(name) or self.check(name)
        try:
            cls = _import(where)
        except (ImportError, AttributeError, ValueError) as exc:
            raise UnknownPlugin(f"cannot load {self.kind} {name!r} ({where}): {exc}") from exc
        if not (isinstance(cls, type) and issubclass(cls, self.base)):
            raise UnknownPlugin(f"{self.kind} {where} is not a {self.base.__name__}")
        return cls


def named_classes(source: str) -> Iterator[tuple[str, str]]:
    """(name, class) for each top-level class of `source` whose body sets `name = "<text>"`."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if (
                    isinstance(item, ast.Assign)
                    and [getattr(t, "id", None) for t in item.targets] == ["name"]
                    and isinstance(item.value, ast.Constant)
                    and isinstance(item.value.value, str)
                ):
                    yield item.value.value, node.name


def _is_path(name: str) -> bool:
    module, sep, attr = name.partition(":")
    return bool(sep and module and attr.isidentifier() and all(p.isidentifier() for p in module.split(".")))


def _import(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


__all__ = ["Plugin", "Registry"]
