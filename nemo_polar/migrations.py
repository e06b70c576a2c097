"""SQLite stores that carry their schema version and migrate forward when opened.

A store lists its migrations, oldest first, numbered from 1. `migrate(conn, MIGRATIONS)` reads
`PRAGMA user_version` and applies every migration past it, each in its own transaction together
with the new version, so a crash leaves the store at one version or the next, never between. A file
from before versions (user_version 0) runs them all: the first creates tables only if they are
missing, and later ones check before they change anything. A store written by a newer version is
refused, never read half-understood.

Stored JSON (a task's spec, a session's data) is migrated too: renaming a field of a stored model is a
migration that rewrites the stored documents (`rewrite_json` with `rename_key`), so the rows still
validate against the renamed model after a restart.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from .errors import ConfigError

Step = Callable[[sqlite3.Connection], None]


@dataclass(frozen=True)
class Migration:
    version: int
    what: str  # one line, for the log and for whoever reads the list
    apply: Step


class StoreTooNew(ConfigError):
    """The file was written by a newer nemo_polar, whose schema this one does not know."""


def version(conn: sqlite3.Connection) -> int:
    return conn.execute("PRAGMA user_version").fetchone()[0]


def open_read_only(path: str | Path) -> sqlite3.Connection:
    """A reader's connection: the file is never created, migrated or written (`mode=ro`)."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"no store at {path}")
    conn = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout=10000")
    return conn


def tables(conn: sqlite3.Connection) -> set[str]:
    return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def migrate(conn: sqlite3.Connection, migrations: Sequence[Migration], name: str = "store") -> int:
    """Bring the store to the last migration's version; returns it. `conn` is in autocommit mode."""
    numbers = [m.version for m in migrations]
    if numbers != list(range(1, len(migrations) + 1)):
        raise ValueError(f"{name}: migrations must be numbered 1..n in order, got {numbers}")
    latest = len(migrations)
    current = version(conn)
    if current > latest:
        raise StoreTooNew(f"{name} has schema version {current}; this nemo_polar knows up to {latest}: upgrade it")
    for m in migrations[current:]:
        conn.execute("BEGIN IMMEDIATE")
        try:
            m.apply(conn)
            conn.execute(f"PRAGMA user_version = {m.version}")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    return latest


def statements(*sql: str) -> Step:
    """Plain SQL statements, run in order (inside the migration's transaction)."""

    def apply(conn: sqlite3.Connection) -> None:
        for statement in sql:
            conn.execute(statement)

    return apply


def add_column(table: str, column: str, kind: str) -> Step:
    """ALTER TABLE ... ADD COLUMN, unless a store from before versions has it already."""

    def apply(conn: sqlite3.Connection) -> None:
        if column not in {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")

    return apply


def rewrite_json(table: str, column: str, change: Callable[[Any], Any], key: str = "rowid") -> Step:
    """Every stored document of `table.column` passed through `change` (a document in, the new one out)."""

    def apply(conn: sqlite3.Connection) -> None:
        rows = conn.execute(f"SELECT {key}, {column} FROM {table} WHERE {column} IS NOT NULL").fetchall()
        for rid, blob in rows:
            conn.execute(
                f"UPDATE {table} SET {column}=? WHERE {key}=?", (orjson.dumps(change(orjson.loads(blob))), rid)
            )

    return apply


def rename_key(old: str, new: str, path: Sequence[str] = ()) -> Callable[[Any], Any]:
    """For `rewrite_json`: the key `old` renamed `new` in the object at `path` (a missing one is left alone)."""

    def change(doc: Any) -> Any:
        target = doc
        for part in path:
            target = target.get(part) if isinstance(target, dict) else None
        if isinstance(target, dict) and old in target:
            target[new] = target.pop(old)
        return doc

    return change


__all__ = ["Migration", "StoreTooNew", "add_column", "migrate", "rename_key", "rewrite_json", "statements", "version"]
