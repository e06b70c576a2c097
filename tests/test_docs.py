"""The docs follow the code: every path the architecture page names exists, and the README's plug-in
tables list exactly what the registries hold."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nemo_polar.evaluators import EVALUATORS
from nemo_polar.harnesses import HARNESSES
from nemo_polar.runtimes import RUNTIMES

ROOT = Path(__file__).resolve().parent.parent
# a backticked word that looks like a path: a folder/ or a file with an extension we keep
PATH = re.compile(r"`([\w./<>-]+(?:/|\.py|\.yaml|\.md|\.sh|\.toml|\.json))`")


def named_paths(text: str) -> set[str]:
    return {p for p in PATH.findall(text) if "<" not in p and not p.startswith(("http", "."))}


def exists(path: str) -> bool:
    """A path as the page writes it: from the repository root, or inside the package."""
    return any((base / path).exists() for base in (ROOT, ROOT / "nemo_polar", ROOT / "tests"))


def test_every_path_the_architecture_page_names_exists():
    text = (ROOT / "docs" / "architecture.md").read_text()
    paths = named_paths(text)
    assert len(paths) > 30  # the page names the tree; an empty set would pass anything
    assert sorted(p for p in paths if not exists(p)) == []


def test_a_missing_path_is_found():
    assert named_paths("see `nemo_polar/nope.py` and `proxy/`") == {"nemo_polar/nope.py", "proxy/"}
    assert not exists("nemo_polar/nope.py") and exists("proxy/")


def readme_table(heading: str) -> set[str]:
    """The backticked names in the first column of the table whose header row starts with `heading`."""
    lines = (ROOT / "README.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {heading} |"))
    names = set()
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        names.update(re.findall(r"`([a-z_]+)`", line.split("|")[1]))
    return names


@pytest.mark.parametrize(
    ("heading", "registry"),
    [("harness", HARNESSES), ("kind", RUNTIMES), ("evaluator", EVALUATORS)],
    ids=["harnesses", "runtimes", "evaluators"],
)
def test_the_readme_tables_list_every_registered_plugin(heading, registry):
    assert readme_table(heading) == set(registry)
