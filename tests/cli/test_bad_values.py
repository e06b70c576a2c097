"""Every `polar` command answers a wrong option or a wrong value with one short line and a non-zero exit,
never a traceback, and refuses it before it starts anything.

The cases come from the parser and the configuration files, not from a list a new command could be
missing from: every command and group gets an unknown option; every argument whose values are
constrained (choices, numbers, names checked by their type) gets a value it refuses, one argument per
kind of value and command (argparse refuses the others alike); every command that takes overrides gets
a wrong option of each of its groups, an unknown key in a section, and a wrong value for a number key
and for a key with choices. Each runs as `python -m nemo_polar.cli ...` in its own process, a few at
a time."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import types
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin

import pytest
from pydantic import BaseModel

from nemo_polar.cli import parser
from nemo_polar.cli.parsing import Command, commands
from nemo_polar.config import CONF_DIR, VALUE_GROUPS, compose

BAD = "nope"
UNKNOWN = "--no-such-option"
TIMEOUT_S = 60  # a command that took a bad value for a good one would start its work: it fails here
MAX_CHARS = 500


@dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]
    names: tuple[str, ...]  # what the message must name: the wrong option or value, and the choices

    def __str__(self) -> str:
        return " ".join(self.argv)


def accepts(action: argparse.Action, text: str) -> bool:
    """Whether argparse takes `text` for `action` (its type, then its choices)."""
    try:
        converted = action.type(text) if callable(action.type) else text
    except (argparse.ArgumentTypeError, TypeError, ValueError):
        return False
    return action.choices is None or converted in action.choices


def some_value(action: argparse.Action) -> str:
    return next(v for v in (*map(str, action.choices or ()), "1", "x") if accepts(action, v))


def required(command: Command, but: argparse.Action | None = None) -> list[str]:
    """The arguments `command` cannot go without, each with a value it takes."""
    out: list[str] = []
    for a in command.arguments:
        if a is not but and a.required and a.nargs not in ("?", "*"):
            out += [a.option_strings[0], some_value(a)] if a.option_strings else [some_value(a)]
    return out


def reach(command: Command) -> list[str]:
    """What follows `command` on a line that parses: down its first subcommands to one that runs."""
    first = next(commands(command.parser), None)
    return required(command) if first is None else [first.path[-1], *reach(first)]


def option_cases(root: argparse.ArgumentParser) -> list[Case]:
    cases = [Case((UNKNOWN, *reach(Command((), root, ""))), (UNKNOWN,))]
    for command in commands(root):
        cases.append(Case((*command.path, UNKNOWN, *reach(command)), (UNKNOWN,)))
        kinds = set()
        for a in command.arguments:
            kind = (a.type, tuple(a.choices or ()))
            if a.nargs == 0 or kind in kinds or accepts(a, BAD):
                continue
            kinds.add(kind)
            given = [a.option_strings[0], BAD] if a.option_strings else [BAD]
            named = a.option_strings[0] if a.option_strings else a.dest
            cases.append(
                Case((*command.path, *required(command, but=a), *given), (named, BAD, *map(str, a.choices or ())))
            )
    return cases


def config_cases(root: argparse.ArgumentParser) -> list[Case]:
    cases = []
    for command in commands(root):
        if command.config is None:
            continue
        line = (*command.path, *required(command))
        for group in command.config.groups():
            if group not in VALUE_GROUPS:  # there a value that is no option is a file: dataset=rows.jsonl
                options = sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))
                cases.append(Case((*line, f"{group}={BAD}"), (f"{group}={BAD}", *options)))
        held = dotted(compose(command.config.name, []))  # a key its file does not hold is not overridden
        keys = [(key, kind) for key, kind in leaves(command.config.settings()) if key in held]
        section = next(k for k, _ in keys if "." in k).split(".")[0]
        cases.append(Case((*line, f"{section}.no_such_key=1"), (f"{section}.no_such_key",)))
        number = next(k for k, kind in keys if int in kind)
        cases.append(Case((*line, f"{number}={BAD}"), (number,)))
        chosen = next(((k, kind) for k, kind in keys if any(get_origin(t) is Literal for t in kind)), None)
        if chosen is not None:
            key, kind = chosen
            choices = [str(c) for t in kind if get_origin(t) is Literal for c in get_args(t)]
            cases.append(Case((*line, f"{key}={BAD}"), (key, *choices)))
    return cases


def leaves(model: type[BaseModel], prefix: str = "") -> list[tuple[str, tuple[Any, ...]]]:
    """Every key of `model` that holds a value, dotted, with the types it may hold."""
    out = []
    for name, info in model.model_fields.items():
        kinds = get_args(info.annotation) if get_origin(info.annotation) in (Union, types.UnionType) else ()
        kinds = kinds or (info.annotation,)
        inner = next((k for k in kinds if isinstance(k, type) and issubclass(k, BaseModel)), None)
        out += leaves(inner, f"{prefix}{name}.") if inner else [(prefix + name, kinds)]
    return out


def dotted(data: dict[str, Any], prefix: str = "") -> set[str]:
    """Every key of a composed configuration, dotted, sections included."""
    out = set()
    for key, value in data.items():
        out.add(prefix + key)
        out |= dotted(value, f"{prefix}{key}.") if isinstance(value, dict) else set()
    return out


def run(case: Case) -> tuple[int, str]:
    """(exit status, what it printed); a command still running at the timeout is stopped with its group."""
    with subprocess.Popen(
        [sys.executable, "-m", "nemo_polar.cli", *case.argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    ) as proc:
        try:
            out, _ = proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            return -1, f"still running after {TIMEOUT_S} s: it started work\n{out}"
    return proc.returncode, out


ROOT = parser()
CASES = option_cases(ROOT) + config_cases(ROOT)


@pytest.fixture(scope="module")
def outcomes() -> dict[Case, tuple[int, str]]:
    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(CASES, pool.map(run, CASES), strict=True))


@pytest.mark.parametrize("case", CASES, ids=str)
def test_a_wrong_option_or_value_gets_one_line_naming_it(case, outcomes):
    rc, out = outcomes[case]
    lines = out.strip().splitlines()
    assert rc > 0 and "Traceback" not in out, out
    assert len(lines) == 1 and len(out) <= MAX_CHARS, out
    assert all(name in out for name in case.names), (case.names, out)


def test_the_walk_reaches_every_command_and_every_kind_of_bad_value():
    for command in commands(ROOT):
        assert any(case.argv[: len(command.path)] == command.path for case in CASES), command.name
    argv = {str(case) for case in CASES}
    assert {"runtime check --only nope", "runtime check --runtime nope", "up harness=nope", "proxy port=nope"} <= argv
    assert "launch slurm --nodes 1 topology=nope" in argv and "cluster slurm nope" in argv
