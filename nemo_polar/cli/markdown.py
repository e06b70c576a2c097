"""The little Markdown the reference pages are written in: tables, code spans, anchors, values."""

from __future__ import annotations

import json
import re
from typing import Any

from ..paths import DEPS, ROOT

NONE = "–"  # an empty cell


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [row(header), row(["---"] * len(header)), *(row(r) for r in rows), ""]


def row(cells: list[str]) -> str:
    return "| " + " | ".join(cell(c) for c in cells) + " |"


def cell(text: str) -> str:
    """One table cell: a pipe would end it early, a line break would end the row."""
    return " ".join(text.replace("|", "\\|").split()) or NONE


def code(text: str) -> str:
    return f"`{text}`"


def anchor(heading: str) -> str:
    """The id GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def paragraph(doc: str | None) -> str:
    """A docstring's first paragraph, on one line."""
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def value(v: Any) -> str:
    """A default as it is written on a command line or in YAML, without this machine's paths in it."""
    if isinstance(v, str):
        return v.replace(str(DEPS), "$POLAR_DEPS").replace(str(ROOT), "<repo>")
    if isinstance(v, bool) or v is None:
        return json.dumps(v)
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_inner(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_inner(x) for x in v) + "]"
    return str(v)


def _inner(v: Any) -> str:
    """A value inside a mapping or list: quoted where YAML's flow style would misread it."""
    if isinstance(v, str) and (not v or re.search(r"[:,{}\[\]#]|^\s|\s$", v)):
        return json.dumps(value(v))
    return value(v)
