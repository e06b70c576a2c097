"""The rollout store's schema, as its migrations, oldest first (`nemo_polar.migrations`): a store written
by an earlier version is brought forward when a writer opens it. A change to the tables is a new
migration at the end, never an edit of an old one."""

from __future__ import annotations

from ...migrations import Migration, add_column, statements

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
)
