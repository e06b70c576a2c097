"""The configuration keys as a Markdown page, read from the settings models and `conf/`: the file each
command composes, every key with its type, default and description, then every config group with its
options, and for a group whose option names a plug-in, each plug-in's own settings (`polar docs` writes
it to docs/configuration.md).

A model typed field of a section is a section of its own (`vllm`, `proxy.upstream`), one typed by a
group's model links to that group, and a model inside a list (`runtime.prepare`'s `Step`) is written
once, where it first appears."""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from ..config import CONF_DIR, ROOT_GROUPS, SELECTORS
from ..evaluators import EVALUATORS
from ..harnesses import HARNESSES
from ..plugins import Registry
from ..runtimes import RUNTIMES
from .markdown import anchor, code, paragraph, table, value
from .parsing import ConfigFile, commands, read

# The groups whose option names a plug-in: its registry, and where the plug-in's own settings sit in the group.
PLUGIN_GROUPS: dict[str, tuple[Registry, str]] = {
    "harness": (HARNESSES, ""),
    "runtime": (RUNTIMES, ""),
    "evaluator": (EVALUATORS, "config."),
}
MISSING: Any = PydanticUndefined  # a required key: no default
INTRO = (
    "Every configuration key, generated from the settings models and `conf/` by `polar docs` (do not edit by "
    "hand). A command that takes overrides composes its file, `conf/<name>.yaml`, with them (Hydra: "
    "`key=value`, `section.key=value`, `group=option`) and checks the result with a strict pydantic model: an "
    "unknown key or a wrong value stops it before it starts anything. Every key below is set the same way, whether "
    "the file lists it or only the model has it: no `+` is needed (`polar up runtime.limits.memory=4g`; Hydra's "
    "`+key=value` still works where the file lacks the key). A key inside a group takes its group picked first "
    "(`harness=codex harness.max_steps=10`). A default is the file's value where it "
    "sets one (a `${...}` is resolved when the command runs), else the model's; `$POLAR_DEPS` is "
    "`<repo>/.deps` unless set."
)
GROUPS_INTRO = (
    "A group's options are files, `conf/<group>/<option>.yaml`, picked by name (`polar up harness=codex "
    "runtime=docker`); a key of the chosen option is then overridden like any other (`harness.max_steps=10`). "
    "`sets` lists what an option changes from the defaults below."
)


def heading(config: ConfigFile) -> str:
    return code(f"conf/{config.name}.yaml")


def group_heading(group: str) -> str:
    return f"Group {code(group)}"


def page(parser: argparse.ArgumentParser) -> str:
    readers: dict[ConfigFile, list[str]] = {}  # each file and the commands that read it, in `--help`'s order
    for command in commands(parser):
        if command.config is not None:
            readers.setdefault(command.config, []).append(command.name)
    writer = Writer(group_models(list(readers)))
    lines = ["# Configuration", "", INTRO, ""]
    lines += table(
        ["file", "read by"],
        [[f"[{heading(c)}](#{anchor(heading(c))})", ", ".join(map(code, names))] for c, names in readers.items()],
    )
    lines += ["Groups: " + ", ".join(f"[{code(g)}](#{anchor(group_heading(g))})" for g in writer.groups) + ".", ""]
    for config, names in readers.items():
        lines += writer.config_section(config, names)
    lines += ["## Groups", "", GROUPS_INTRO, ""]
    for group in writer.groups:
        lines += writer.group_section(group)
    return "\n".join(lines).rstrip() + "\n"


def group_models(configs: list[ConfigFile]) -> dict[str, type[BaseModel] | None]:
    """Each group of `conf/` and the model that checks its options: a selector's, the model of a root
    group's file, or the type of the commands' top-level field named after it."""
    found: dict[str, type[BaseModel] | None] = {}
    for folder in sorted(p for p in CONF_DIR.iterdir() if p.is_dir() and any(p.glob("*.yaml"))):
        group = folder.name
        found[group] = SELECTORS.get(group) or next(filter(None, (_group_model(c, group) for c in configs)), None)
    return found


def _group_model(config: ConfigFile, group: str) -> type[BaseModel] | None:
    model = config.settings()
    if group in ROOT_GROUPS.get(config.name, ()):
        return model
    field = model.model_fields.get(group)
    return _model(field.annotation) if field is not None else None


class Writer:
    """Writes the sections; remembers the models written once per page (those inside lists)."""

    def __init__(self, groups: dict[str, type[BaseModel] | None]):
        self.groups = groups
        self.group_of = {m: g for g, m in groups.items() if m is not None}
        self.written: set[type[BaseModel]] = set()

    def config_section(self, config: ConfigFile, readers: list[str]) -> list[str]:
        model, data, chosen = config.settings(), read(config.path), config.groups()
        data.pop("defaults", None)
        lines = [f"## {heading(config)}", "", _comment(config.path), ""]
        lines += [f"Read by {', '.join(map(code, readers))}; checked by {code(_where(model))}.", ""]
        if chosen:
            picks = [f"[{code(f'{g}={value(o)}')}](#{anchor(group_heading(g))})" for g, o in chosen.items()]
            lines += ["Groups: " + ", ".join(picks) + ".", ""]
        root = self.group_of.get(model)
        if root in ROOT_GROUPS.get(config.name, ()):
            link = f"[{group_heading(root)}](#{anchor(group_heading(root))})"
            sets = ", ".join(code(f"{k}={value(v)}") for k, v in _flat(data).items())
            return lines + [f"Its keys are those of {link}, at the root" + (f"; it sets {sets}." if sets else "."), ""]
        return lines + self.tables(model, "", data, _defaults(model), chosen, level=3)

    def group_section(self, group: str) -> list[str]:
        model = self.groups[group]
        checked = f"; checked by {code(_where(model))}" if model else ""
        lines = [
            f"### {group_heading(group)}",
            "",
            f"`{group}=<option>` picks `conf/{group}/<option>.yaml`{checked}.",
            "",
        ]
        lines += [paragraph(model.__doc__), ""] if model is not None and model.__doc__ else []
        rows = []
        for path in sorted((CONF_DIR / group).glob("*.yaml")):
            data = read(path)
            data.pop("defaults", None)
            sets = _changes(_flat(data), _flat(_defaults(model)) if model else {})
            rows.append([code(path.stem), ", ".join(code(f"{k}={value(v)}") for k, v in sets.items()), _comment(path)])
        lines += table(["option", "sets", "about"], rows)
        if model is not None:
            lines += self.tables(model, "", {}, _defaults(model), {}, level=4, title=f"{code(group)} keys", doc=False)
        if group in PLUGIN_GROUPS:
            lines += self.plugin_sections(*PLUGIN_GROUPS[group])
        return lines

    def plugin_sections(self, registry: Registry, prefix: str) -> list[str]:
        """Each plug-in's own settings; those every plug-in of the kind takes, once."""
        common = registry.base.Settings
        title = f"Every {registry.kind}'s settings"
        lines = self.tables(common, prefix, {}, _defaults(common), {}, level=4, title=title, doc=False)
        bare = []
        for name in registry:
            cls = registry[name]
            own = set(cls.Settings.model_fields) - set(common.model_fields)
            if not own:
                bare.append(code(name))
                continue
            doc = cls.__dict__.get("__doc__") or sys.modules[cls.__module__].__doc__
            lines += [f"#### {registry.kind.capitalize()} {code(name)}", "", paragraph(doc), ""]
            lines += self.tables(cls.Settings, prefix, {}, _defaults(cls.Settings), {}, level=5, only=own)
        return lines + ([f"No settings of their own: {', '.join(bare)}.", ""] if bare else [])

    def tables(
        self,
        model: type[BaseModel],
        prefix: str,
        given: dict[str, Any],
        defaults: dict[str, Any],
        chosen: dict[str, Any],
        level: int,
        title: str = "",
        only: set[str] | None = None,
        doc: bool = True,
    ) -> list[str]:
        """The table of `model`'s keys (`given`: the file's values, `chosen`: its groups' options; `only`:
        these keys alone), under a heading of `level` when it has a `title`, then one for each section
        inside it, at the same level (their keys are dotted)."""
        rows, after = [], []
        for name, info in model.model_fields.items():
            if only is not None and name not in only:
                continue
            key, mine, default = prefix + name, given.get(name, MISSING), defaults.get(name, MISSING)
            group, section = self._group(info.annotation), _model(info.annotation)
            if section is not None and group is None:
                inner = mine if isinstance(mine, dict) else {}
                inner_defaults = default if isinstance(default, dict) else _defaults(section)
                after += self.tables(section, key + ".", inner, inner_defaults, {}, level, title=code(key))
                continue
            if name in chosen:
                shown = code(f"{name}={value(chosen[name])}")
                extra = ", ".join(code(f"{key}.{k}={value(v)}") for k, v in _flat(mine).items()) if mine else ""
                shown += f" with {extra}" if extra else ""
            else:
                shown = _shown(default if mine is MISSING else mine)
            rows.append([code(key), self.type_name(info.annotation), shown, info.description or ""])
            after += self._items(info.annotation, level)
        lines = []
        if rows:
            lines += [f"{'#' * level} {title}", ""] if title else []
            lines += [paragraph(model.__doc__), ""] if title and doc and model.__doc__ else []
            lines += table(["key", "type", "default", "description"], rows)
        return lines + after

    def type_name(self, annotation: Any) -> str:
        if annotation is type(None):
            return "null"
        if annotation in self.group_of:
            group = self.group_of[annotation]
            return f"[{group}](#{anchor(group_heading(group))})"
        origin, args = get_origin(annotation), get_args(annotation)
        if origin is Literal:
            return " or ".join(code(value(a)) for a in args)
        if origin in (Union, types.UnionType):
            return " or ".join(self.type_name(a) for a in sorted(args, key=lambda a: a is type(None)))
        if origin in (list, tuple, set, frozenset):
            return "list of " + self.type_name(args[0]) if args else "list"
        if origin is dict:
            return f"mapping of {self.type_name(args[0])} to {self.type_name(args[1])}" if args else "mapping"
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return f"[{code(annotation.__name__)}](#{anchor(code(annotation.__name__))})"
        names = {str: "text", int: "integer", float: "number", bool: "boolean", Any: "any"}
        return names.get(annotation, getattr(annotation, "__name__", str(annotation)))

    def _group(self, annotation: Any) -> str | None:
        return self.group_of.get(_model(annotation))  # type: ignore[arg-type]

    def _items(self, annotation: Any, level: int) -> list[str]:
        """A section for each model inside a list or mapping, the first time the page meets it."""
        lines = []
        for inner in _inside(annotation):
            if inner not in self.written and inner not in self.group_of:
                self.written.add(inner)
                lines += self.tables(inner, "", {}, _defaults(inner), {}, level, title=code(inner.__name__))
        return lines


def _model(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds: itself, or the one of `Model | None`."""
    if get_origin(annotation) in (Union, types.UnionType):
        models = [m for a in get_args(annotation) if (m := _model(a)) is not None]
        return models[0] if len(models) == 1 else None
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _inside(annotation: Any) -> list[type[BaseModel]]:
    """The models inside a list, a mapping or a union of them."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, types.UnionType):
        return [m for a in args for m in _inside(a)]
    if origin in (list, tuple, set, frozenset, dict):
        return [m for a in args for m in ([a] if _model(a) else _inside(a))]
    return []


def _defaults(model: type[BaseModel]) -> dict[str, Any]:
    """Each key's default as plain data (a section's as a mapping); MISSING where it is required."""
    out = {}
    for name, info in model.model_fields.items():
        default = info.default_factory() if info.default_factory is not None else info.default  # type: ignore[call-arg]
        out[name] = default.model_dump(mode="json") if isinstance(default, BaseModel) else default
    return out


def _shown(v: Any) -> str:
    return "required" if v is MISSING else code(value(v))


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    """`{a: {b: 1}}` as `{"a.b": 1}`; an empty mapping stays a value."""
    if not isinstance(data, dict) or not data:
        return {prefix.rstrip("."): data} if prefix else {}
    return {k: v for key, inner in data.items() for k, v in _flat(inner, f"{prefix}{key}.").items()}


def _changes(values: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """What an option sets beyond the defaults; a null that is not a key of the model is left to the plug-in."""
    return {k: v for k, v in values.items() if (defaults[k] != v if k in defaults else v is not None)}


def _comment(path: Path) -> str:
    """The comment lines a conf file opens with."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    return " ".join(lines)


def _where(model: type) -> str:
    return f"{model.__module__}:{model.__qualname__}"
