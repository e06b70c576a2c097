"""The reference pages cannot go stale: docs/cli.md and docs/configuration.md are what `polar docs` writes
from the parser, the settings models and conf/ now, and they hold every command, argument and key."""

from __future__ import annotations

import argparse

from nemo_polar.cli import cli_reference, config_reference, docs, parser
from nemo_polar.cli.parsing import Parser, commands
from nemo_polar.config import CONF_DIR


def test_the_committed_pages_are_what_polar_docs_writes_now():
    stale = docs.stale(docs.DOCS, docs.written(parser()))
    assert not stale, f"docs/{' and docs/'.join(stale)} differ from the code: run `polar docs` and commit the result"


def test_polar_docs_writes_both_pages_and_check_names_a_stale_one(tmp_path, capsys):
    assert docs._docs(argparse.Namespace(out=str(tmp_path), check=False, root=parser())) == 0
    assert docs._docs(argparse.Namespace(out=str(tmp_path), check=True, root=parser())) == 0
    (tmp_path / "cli.md").write_text("old\n")
    assert docs._docs(argparse.Namespace(out=str(tmp_path), check=True, root=parser())) == 1
    assert f"{tmp_path / 'cli.md'} is stale: run `polar docs`" in capsys.readouterr().err


def test_the_command_page_holds_every_command_and_argument():
    root = parser()
    page = cli_reference.page(root)
    for command in commands(root):
        assert f"`{command.name}`" in page
        for action in command.arguments:
            assert f"`{(action.option_strings or [action.dest])[0]}`" in page, (command.name, action.dest)


def test_a_new_option_is_on_the_page():
    root = Parser(prog="polar")
    sub = root.add_subparsers(dest="command", required=True)
    tool = sub.add_parser("tool", help="a tool")
    tool.add_argument("--level", type=int, default=3, choices=[1, 2, 3], help="how far it goes")
    page = cli_reference.page(root)
    assert "| `--level` | one of `1`, `2`, `3` | `3` | how far it goes |" in page
    assert "polar tool [options]" in page


def test_the_configuration_page_holds_every_key_and_group_option():
    root = parser()
    page = config_reference.page(root)
    configs = {c.config for c in commands(root) if c.config is not None}
    assert {c.name for c in configs} >= {"up", "learn", "rollout", "gateway", "proxy", "launch"}
    for config in configs:
        for name in config.settings().model_fields:
            assert f"`{name}" in page or f".{name}`" in page, (config.name, name)
    for option in CONF_DIR.glob("*/*.yaml"):
        assert f"| `{option.stem}` |" in page, option


def test_a_key_default_is_the_files_then_the_models():
    configs = [c.config for c in commands(parser()) if c.config is not None]
    writer = config_reference.Writer(config_reference.group_models(configs))
    section = {c.name: "\n".join(writer.config_section(c, [])) for c in configs}
    learn, rollout, up = section["learn"], section["rollout"], section["up"]
    assert "| `capacity.init` | integer | `4` |" in learn  # the file's; the model's is 8
    assert "| `allow_unsandboxed` | boolean | `false` |" in rollout  # not in the file: the model's
    assert "| `proxy` | [proxy](#group-proxy) | `proxy=default` with `proxy.port=0`" in up  # then what the file sets


def test_an_argument_of_no_type_reads_as_text():
    action = argparse.ArgumentParser().add_argument("--name")
    assert cli_reference._value(action) == "text"
