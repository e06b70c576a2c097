"""The rollout store's schema, as its migrations, oldest first (`nemo_polar.migrations`): a store written
by an earlier version is brought forward when a writer opens it. A change to the tables is a new
migration at the end, never an edit of an old one."""

from __future__ import annotations

from typing import Any

from ...migrations import Migration, add_column, rewrite_json, statements


def named_failure(result: Any) -> Any:
    """A stored result from before `SessionResult.failure_kind`, given the kind its words meant to the versions that
    wrote it (the only place those words are read: they are frozen in the rows)."""
    if not isinstance(result, dict) or "failure_kind" in result:
        return result
    status, error = result.get("status"), str(result.get("error") or "")
    kind = None
    if status in ("timeout", "cancelled"):
        kind = "agent_timeout" if status == "timeout" else "cancelled"
    elif status != "completed":
        kind = "session_lost" if "lost" in error or "restarted" in error else "agent_run_error"
    elif result.get("masked") or result.get("reward") is None:
        kind = "verifier_error" if "evaluation" in error else "agent_run_error"
    return result | {"failure_kind": kind}


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "tasks, sessions, transitions, nodes",
        statements(
            """CREATE TABLE IF NOT EXISTS tasks (
              id TEXT PRIMARY KEY,
              spec BLOB NOT NULL,
              status TEXT NOT NULL,
              priority INTEGER NOT NULL,
              session_timeout_s REAL NOT NULL,
              created_at REAL NOT NULL,
              finished_at REAL
            )""",
            """CREATE TABLE IF NOT EXISTS sessions (
              id TEXT PRIMARY KEY,
              task_id TEXT NOT NULL REFERENCES tasks(id),
              sample_index INTEGER NOT NULL,
              state TEXT NOT NULL,
              node_id TEXT,
              attempt INTEGER NOT NULL DEFAULT 0,
              started_at REAL,
              updated_at REAL NOT NULL,
              result BLOB
            )""",
            "CREATE INDEX IF NOT EXISTS sessions_by_task ON sessions(task_id, sample_index)",
            "CREATE INDEX IF NOT EXISTS sessions_by_state ON sessions(state)",
            """CREATE TABLE IF NOT EXISTS transitions (
              session_id TEXT NOT NULL,
              from_state TEXT,
              to_state TEXT NOT NULL,
              at REAL NOT NULL,
              cause TEXT NOT NULL
            )""",
            "CREATE INDEX IF NOT EXISTS transitions_by_session ON transitions(session_id)",
            """CREATE TABLE IF NOT EXISTS nodes (
              id TEXT PRIMARY KEY,
              registration BLOB NOT NULL,
              metrics BLOB NOT NULL,
              last_heartbeat REAL NOT NULL,
              draining INTEGER NOT NULL DEFAULT 0
            )""",
        ),
    ),
    Migration(2, "tasks.group_id: a GRPO group spread over one-sample tasks", add_column("tasks", "group_id", "TEXT")),
    Migration(
        3, "an index on tasks.group_id", statements("CREATE INDEX IF NOT EXISTS tasks_by_group ON tasks(group_id)")
    ),
    Migration(
        4,
        "sessions.result.failure_kind: a stored result's kind of failure, named",
        rewrite_json("sessions", "result", named_failure),
    ),
)
