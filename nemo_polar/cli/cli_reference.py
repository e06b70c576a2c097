"""The `polar` commands as a Markdown page, read from the parser itself: every command and subcommand,
its arguments with their values, defaults and help, and where a command's configuration keys are
(`polar docs` writes it to docs/cli.md)."""

from __future__ import annotations

import argparse

from . import config_reference
from .markdown import NONE, anchor, code, table, value
from .parsing import Command, commands

INTRO = (
    "Every `{prog}` command, generated from its parser by `polar docs` (do not edit by hand). "
    "`{prog} <command> --help` prints the same. A wrong option or value stops a command with one line naming it; "
    "the keys of commands that take Hydra overrides are in [configuration.md](configuration.md)."
)


def page(parser: argparse.ArgumentParser) -> str:
    found = list(commands(parser))
    lines = [f"# `{parser.prog}` commands", "", INTRO.format(prog=parser.prog), ""]
    lines += table(["command", "what it does"], [[_link(c), c.help] for c in found])
    for command in found:
        lines += section(command)
    return "\n".join(lines).rstrip() + "\n"


def section(command: Command) -> list[str]:
    lines = ["#" * (len(command.path) + 1) + f" {code(command.name)}", "", command.help, ""]
    if command.subcommands is not None:
        return lines + ["Its commands: " + ", ".join(_link(c) for c in commands(command.parser)) + ".", ""]
    lines += ["```", synopsis(command), "```", ""]
    rows = [[_name(a), _value(a), _default(a), a.help or ""] for a in command.arguments]
    if rows:
        lines += table(["argument", "value", "default", "description"], rows)
    if command.config is not None:
        where = config_reference.heading(command.config)
        lines += [f"Its overrides set the keys of [{where}](configuration.md#{anchor(where)}).", ""]
    return lines


def synopsis(command: Command) -> str:
    """`polar launch slurm --nodes NODES [options] [overrides ...]`: what must be given, and where the rest goes."""
    parts = [command.name]
    optional = [a for a in command.arguments if a.option_strings]
    parts += [f"{a.option_strings[-1]} {_metavar(a)}" for a in optional if a.required]
    parts += ["[options]"] if any(not a.required for a in optional) else []
    for a in command.arguments:
        if not a.option_strings:
            name = _metavar(a)
            parts.append({"?": f"[{name}]", "*": f"[{name} ...]", "+": f"{name} [{name} ...]"}.get(a.nargs, name))
    return " ".join(parts)


def _link(command: Command) -> str:
    return f"[{code(command.name)}](#{anchor(command.name)})"


def _name(action: argparse.Action) -> str:
    return ", ".join(code(o) for o in action.option_strings) or code(action.dest)


def _metavar(action: argparse.Action) -> str:
    if action.choices is not None:
        return "{" + ",".join(map(str, action.choices)) + "}"
    return str(action.metavar or (action.dest.upper() if action.option_strings else action.dest))


def _value(action: argparse.Action) -> str:
    if action.nargs == 0:
        return "flag"
    if action.choices is not None:
        kind = "one of " + ", ".join(code(str(c)) for c in action.choices)
    else:
        kind = _type_name(action.type)
    if isinstance(action, argparse._AppendAction):
        return kind + ", repeatable"
    return kind + {"*": ", any number", "+": ", one or more"}.get(str(action.nargs), "")


def _type_name(kind: object) -> str:
    names = {None: "text", str: "text", int: "integer", float: "number"}
    if kind in names:
        return names[kind]  # type: ignore[index]
    doc = getattr(kind, "__doc__", None)
    return doc.strip().splitlines()[0] if doc else getattr(kind, "__name__", str(kind))


def _default(action: argparse.Action) -> str:
    if action.required and action.nargs not in ("?", "*"):  # argparse marks `nargs="*"` required: it never fails
        return "required"
    if action.nargs == 0 or action.default is None or action.default == [] or action.default == argparse.SUPPRESS:
        return NONE
    return code(value(action.default))
