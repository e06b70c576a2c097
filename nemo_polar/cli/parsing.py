"""What every `polar` command is made of: the parser class that answers a wrong option or value in one
line, the configuration file a command loads (declared on its parser, so the handler, the reference
pages and the tests read the same declaration), and a walk over the commands."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from pydantic import BaseModel


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose error is one line naming the command, with no usage block above it.
    Unknown arguments are refused by the parser they were given to, so the line names the subcommand
    (`polar up: unrecognized arguments: --nope`), not `polar`."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}\n")

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> tuple[argparse.Namespace, list[str]]:
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)} (`{self.prog} --help` lists its arguments)")
        return namespace, extras


@dataclass(frozen=True)
class ConfigFile:
    """The configuration a command loads: `conf/<name>.yaml` composed with its overrides, validated by
    `model` ("module:Class", imported only when the command runs or the reference is written)."""

    name: str
    model: str

    def settings(self) -> type[BaseModel]:
        module, _, cls = self.model.partition(":")
        return getattr(importlib.import_module(module), cls)

    @property
    def path(self) -> Path:
        from ..config import CONF_DIR

        return CONF_DIR / f"{self.name}.yaml"

    def groups(self) -> dict[str, Any]:
        """`{group: option}` as its defaults list picks them (`proxy@_here_: default` is the group proxy)."""
        picks = [item for item in read(self.path).get("defaults", []) if isinstance(item, dict)]
        return {key.removeprefix("override ").split("@")[0]: option for item in picks for key, option in item.items()}

    def load(self, overrides: list[str]) -> Any:
        from ..config import load

        return load(self.settings(), self.name, overrides)


def read(path: Path) -> dict[str, Any]:
    """A conf file as written: its own keys, and `defaults`, its Hydra defaults list (nothing resolved)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(path), resolve=False)  # type: ignore[return-value]


@dataclass(frozen=True)
class Command:
    """One command of the tree: a group (`polar bench`) or one that runs (`polar bench proxy`)."""

    path: tuple[str, ...]
    parser: argparse.ArgumentParser
    help: str

    @property
    def name(self) -> str:
        return self.parser.prog

    @property
    def subcommands(self) -> argparse._SubParsersAction | None:
        return subcommands(self.parser)

    @property
    def config(self) -> ConfigFile | None:
        return self.parser.get_default("config")

    @property
    def arguments(self) -> list[argparse.Action]:
        """Its own arguments, without --help and the subcommand choice."""
        return [
            a for a in self.parser._actions if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))
        ]


def subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    return next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[Command]:
    """Every command under `parser`, depth first, in `--help`'s order."""
    sub = subcommands(parser)
    if sub is None:
        return
    helps = {a.dest: a.help or "" for a in sub._choices_actions}
    for name, child in sub.choices.items():
        yield Command((*path, name), child, helps.get(name, ""))
        yield from commands(child, (*path, name))
