"""The rollout server's persistent state: tasks, sessions, their transitions, gateway nodes.

Unlike the proxy's record store, every write here is synchronous and one transaction: when a
method returns, the change is on disk (WAL, synchronous=FULL), so a kill -9 right after an
acknowledged result loses nothing. Sessions are never deleted; every state change is kept as a
transition row with its cause, so "why did this sample end like that" always has an answer.

The schema is versioned (`schema.MIGRATIONS`, see `nemo_polar.migrations`): a store written by an
earlier version is brought forward when it is opened, stored specs included.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ...contracts import FailureKind, NodeMetrics, NodeRegistration, SessionResult, TaskSpec
from ...errors import ConfigError, Conflict, IllegalMove, NotFound, RequestInvalid
from ...migrations import Migration, StoreTooNew, migrate, open_read_only, tables, version
from ...plugins import STORED
from ...rollup import SUMMED
from ...states import SessionState
from .schema import MIGRATIONS

_ORDER = list(SessionState)  # the contract's declaration order is the lifecycle order
_TERMINAL_SQL = "('completed','error','timeout','cancelled')"


@dataclass(frozen=True, slots=True)
class SessionRow:
    id: str
    task_id: str
    sample_index: int
    state: SessionState
    node_id: str | None
    attempt: int
    updated_at: float
    result: dict[str, Any] | None

    def as_json(self) -> dict[str, Any]:
        return {
            "session_id": self.id,
            "task_id": self.task_id,
            "sample_index": self.sample_index,
            "state": self.state.value,
            "node_id": self.node_id,
            "attempt": self.attempt,
            "updated_at": self.updated_at,
            "result": self.result,
        }


@dataclass(frozen=True, slots=True)
class TaskRow:
    id: str
    spec: TaskSpec
    status: str  # running | completed | cancelled
    created_at: float
    finished_at: float | None

    def as_json(self) -> dict[str, Any]:
        return {
            "task_id": self.id,
            "status": self.status,
            "created_at": self.created_at,
            "finished_at": self.finished_at,
            "num_samples": self.spec.num_samples,
            "priority": self.spec.priority,
        }


@dataclass(frozen=True, slots=True)
class NodeRow:
    registration: NodeRegistration
    metrics: NodeMetrics
    last_heartbeat: float
    draining: bool

    @property
    def id(self) -> str:
        return self.registration.node_id

    def as_json(self) -> dict[str, Any]:
        return {
            "node_id": self.id,
            "registration": self.registration.model_dump(exclude={"token"}),
            "metrics": self.metrics.model_dump(),
            "last_heartbeat": self.last_heartbeat,
            "draining": self.draining,
        }


@dataclass(frozen=True, slots=True)
class Outcome:
    """What recording a result did: `duplicate` when the session was already final."""

    duplicate: bool
    session: SessionRow
    task_finished: bool = False


def legal(src: SessionState, dst: SessionState) -> bool:
    """Forward moves only (a node may skip stages it does not report); nothing leaves a terminal state."""
    if src.terminal:
        return False
    return dst.terminal or _ORDER.index(dst) > _ORDER.index(src)


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")  # an acknowledged result survives power loss too
    conn.execute("PRAGMA busy_timeout=10000")
    return conn


def _session(row: tuple) -> SessionRow:
    sid, task_id, idx, state, node_id, attempt, updated_at, result = row
    return SessionRow(
        sid, task_id, idx, SessionState(state), node_id, attempt, updated_at, orjson.loads(result) if result else None
    )


def _task(row: tuple, spec_model: type[TaskSpec]) -> TaskRow:
    tid, spec, status, created_at, finished_at = row
    # checked when it was submitted: its plug-ins are not loaded again (STORED)
    return TaskRow(tid, spec_model.model_validate(orjson.loads(spec), context=STORED), status, created_at, finished_at)


def _node(row: tuple) -> NodeRow:
    reg, metrics, last, draining = row
    return NodeRow(
        NodeRegistration.model_validate(orjson.loads(reg)),
        NodeMetrics.model_validate(orjson.loads(metrics)),
        last,
        bool(draining),
    )


_SESSION_COLS = "id, task_id, sample_index, state, node_id, attempt, updated_at, result"
_TASK_COLS = "id, spec, status, created_at, finished_at"
_NODE_COLS = "registration, metrics, last_heartbeat, draining"


class RolloutStore:
    """`migrations` and `spec_model` are the current schema's; tests pass others to play a later version.
    `read_only`: for readers (`polar view`): the file is neither created, migrated nor written, and one
    of another schema version is refused, naming why."""

    def __init__(
        self,
        path: str | Path,
        *,
        read_only: bool = False,
        migrations: Sequence[Migration] = MIGRATIONS,
        spec_model: type[TaskSpec] = TaskSpec,
    ):
        self.path = Path(path)
        name = f"rollout store {self.path}"
        if read_only:
            self._conn = open_read_only(self.path)
            self.schema_version = version(self._conn)
            if self.schema_version != len(migrations):
                self._conn.close()
                newer = self.schema_version > len(migrations)
                raise (StoreTooNew if newer else ConfigError)(
                    f"{name} has schema version {self.schema_version}, this nemo_polar reads {len(migrations)}: "
                    + ("upgrade it" if newer else "a rollout server migrates it")
                )
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = _connect(self.path)
            self.schema_version = migrate(self._conn, migrations, name)
        self._spec_model = spec_model
        self._lock = threading.RLock()  # one connection, shared by the service's worker threads

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; IMMEDIATE so a read-then-write cannot race another writer."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _read(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._lock:
            return self._conn.execute(sql, args).fetchall()

    # --- tasks --------------------------------------------------------------------------------
    def submit(self, spec: TaskSpec) -> tuple[TaskRow, list[SessionRow]]:
        """The task and its `num_samples` sessions, all or nothing."""
        task_id = spec.task_id or f"task-{uuid.uuid4().hex[:16]}"
        spec = spec.model_copy(update={"task_id": task_id})
        now = time.time()
        rows = [
            (f"session-{uuid.uuid4().hex}", task_id, i, SessionState.REGISTERED.value, None, 0, now, None)
            for i in range(spec.num_samples)
        ]
        with self._tx() as c:
            if c.execute("SELECT 1 FROM tasks WHERE id=?", (task_id,)).fetchone():
                raise Conflict(f"task {task_id!r} was already submitted: task ids are unique, submit under a new id")
            c.execute(
                "INSERT INTO tasks(id, spec, status, priority, session_timeout_s, created_at, group_id)"
                " VALUES (?,?,?,?,?,?,?)",
                (
                    task_id,
                    orjson.dumps(spec.model_dump()),
                    "running",
                    spec.priority,
                    spec.session_timeout_s,
                    now,
                    spec.group_id,
                ),
            )
            c.executemany(f"INSERT INTO sessions({_SESSION_COLS}) VALUES (?,?,?,?,?,?,?,?)", rows)
            c.executemany(
                "INSERT INTO transitions VALUES (?,?,?,?,?)",
                [(r[0], None, r[3], now, "submitted") for r in rows],
            )
        return self.task(task_id), [_session(r) for r in rows]

    def task(self, task_id: str) -> TaskRow:
        rows = self._read(f"SELECT {_TASK_COLS} FROM tasks WHERE id=?", (task_id,))
        if not rows:
            raise NotFound(f"no task {task_id!r}")
        return _task(rows[0], self._spec_model)

    def tasks(self, status: str | None = None) -> list[TaskRow]:
        if status:
            rows = self._read(f"SELECT {_TASK_COLS} FROM tasks WHERE status=? ORDER BY created_at", (status,))
        else:
            rows = self._read(f"SELECT {_TASK_COLS} FROM tasks ORDER BY created_at")
        return [_task(r, self._spec_model) for r in rows]

    def group(self, group_id: str) -> list[TaskRow]:
        """The tasks of one GRPO group (the samples of one prompt, submitted as one task each)."""
        rows = self._read(f"SELECT {_TASK_COLS} FROM tasks WHERE group_id=? ORDER BY created_at", (group_id,))
        return [_task(r, self._spec_model) for r in rows]

    def group_completed(self, group_id: str) -> int:
        """How many sessions of the group's tasks completed."""
        row = self._read(
            "SELECT COUNT(*) FROM sessions JOIN tasks ON tasks.id = sessions.task_id"
            " WHERE tasks.group_id=? AND sessions.state='completed'",
            (group_id,),
        )
        return row[0][0]

    def cancel(self, task_id: str, cause: str = "task cancelled", task_status: str = "cancelled") -> list[SessionRow]:
        """Every non-final session of the task -> cancelled; returns the sessions it moved.

        `task_status` is what a still-running task becomes: cancelled, or completed for an early stop.
        """
        self.task(task_id)
        now = time.time()
        with self._tx() as c:
            live = [
                _session(r)
                for r in c.execute(
                    f"SELECT {_SESSION_COLS} FROM sessions WHERE task_id=? AND state NOT IN {_TERMINAL_SQL}",
                    (task_id,),
                )
            ]
            for s in live:
                result = SessionResult(
                    session_id=s.id,
                    task_id=task_id,
                    status=SessionState.CANCELLED,
                    masked=True,
                    node_id=s.node_id,
                    error=cause,
                    failure_kind=FailureKind.CANCELLED,
                )
                self._set(c, s, SessionState.CANCELLED, cause, now, result.model_dump(mode="json"))
            c.execute(
                "UPDATE tasks SET status=?, finished_at=? WHERE id=? AND status='running'", (task_status, now, task_id)
            )
        return [self.session(s.id) for s in live]

    # --- sessions -----------------------------------------------------------------------------
    def session(self, session_id: str) -> SessionRow:
        rows = self._read(f"SELECT {_SESSION_COLS} FROM sessions WHERE id=?", (session_id,))
        if not rows:
            raise NotFound(f"no session {session_id!r}")
        return _session(rows[0])

    def sessions(self, task_id: str | None = None, state: SessionState | None = None) -> list[SessionRow]:
        where, args = [], []
        if task_id is not None:
            where, args = [*where, "task_id=?"], [*args, task_id]
        if state is not None:
            where, args = [*where, "state=?"], [*args, state.value]
        sql = f"SELECT {_SESSION_COLS} FROM sessions"
        if where:
            sql += " WHERE " + " AND ".join(where)
        return [_session(r) for r in self._read(sql + " ORDER BY task_id, sample_index", tuple(args))]

    def live_sessions(self, node_id: str) -> list[SessionRow]:
        rows = self._read(
            f"SELECT {_SESSION_COLS} FROM sessions WHERE node_id=? AND state NOT IN {_TERMINAL_SQL}", (node_id,)
        )
        return [_session(r) for r in rows]

    def last_change(self) -> int:
        """Grows with every state change: a reader's cue to read again."""
        return self._read("SELECT COALESCE(MAX(rowid), 0) FROM transitions")[0][0]

    @staticmethod
    def holds(path: str | Path) -> bool:
        """Whether the SQLite file at `path` is a rollout store (read only)."""
        conn = open_read_only(path)
        try:
            return tables(conn) >= {"tasks", "sessions", "transitions"}
        finally:
            conn.close()

    def transitions(self, session_id: str) -> list[dict[str, Any]]:
        rows = self._read(
            "SELECT from_state, to_state, at, cause FROM transitions WHERE session_id=? ORDER BY rowid", (session_id,)
        )
        return [{"from": f, "to": t, "at": at, "cause": cause} for f, t, at, cause in rows]

    def move(self, session_id: str, to: SessionState, cause: str, node_id: str | None = None) -> SessionRow:
        """A progress report (initializing, running, ...); refuses backward moves and moves out of a final state."""
        if to.terminal:
            raise RequestInvalid(f"{to.value} is final: send it as a session result, with its reward or error")
        with self._tx() as c:
            s = self._get(c, session_id)
            if not legal(s.state, to):
                raise IllegalMove(f"session {session_id} cannot move from {s.state.value} to {to.value}")
            if node_id and s.node_id and node_id != s.node_id:  # a stale copy on a node we gave up on
                raise IllegalMove(f"session {session_id} is assigned to node {s.node_id}, not {node_id}: drop it")
            self._set(c, s, to, cause, time.time(), node_id=node_id or s.node_id)
        return self.session(session_id)

    def record_result(self, result: SessionResult, cause: str = "result") -> Outcome:
        """The first final result wins; a later one is reported as a duplicate and changes nothing."""
        if not result.status.terminal:
            raise RequestInvalid(f"a session result needs a final status, got {result.status.value!r}")
        with self._tx() as c:
            s = self._get(c, result.session_id)
            if s.task_id != result.task_id:
                raise RequestInvalid(f"session {s.id} belongs to task {s.task_id!r}, not {result.task_id!r}")
            if s.state.terminal:
                return Outcome(True, s)
            self._set(
                c,
                s,
                result.status,
                result.error or cause,
                time.time(),
                result.model_dump(mode="json"),
                node_id=result.node_id or s.node_id,
            )
            finished = self._finish_task_if_done(c, s.task_id)
        return Outcome(False, self.session(s.id), finished)

    def mark_dispatched(self, session_id: str, node_id: str) -> SessionRow:
        """Assign a registered session to a node; the attempt counter tells a retry from a new session."""
        return self.mark_dispatched_many([(session_id, node_id)])[0]

    def mark_dispatched_many(self, plan: list[tuple[str, str]]) -> list[SessionRow]:
        """`mark_dispatched` for a batch, in one transaction (one fsync, not one per session)."""
        with self._tx() as c:
            now = time.time()
            for session_id, node_id in plan:
                s = self._get(c, session_id)
                if s.state is not SessionState.REGISTERED or s.node_id is not None:
                    raise IllegalMove(
                        f"session {session_id} is not waiting for dispatch ({s.state.value}, {s.node_id})"
                    )
                c.execute(
                    "UPDATE sessions SET node_id=?, attempt=attempt+1, updated_at=? WHERE id=?",
                    (node_id, now, session_id),
                )
                c.execute(
                    "INSERT INTO transitions VALUES (?,?,?,?,?)",
                    (
                        session_id,
                        "registered",
                        "registered",
                        now,
                        f"dispatched to {node_id} (attempt {s.attempt + 1})",
                    ),
                )
        return [self.session(session_id) for session_id, _ in plan]

    def requeue(self, session_id: str, cause: str) -> SessionRow:
        """Back to registered with no node: only for sessions whose agent never ran (nothing to lose)."""
        with self._tx() as c:
            s = self._get(c, session_id)
            if s.state not in (SessionState.REGISTERED, SessionState.INITIALIZING, SessionState.READY):
                raise IllegalMove(f"session {session_id} is {s.state.value}: only unstarted sessions are re-queued")
            now = time.time()
            c.execute(
                "UPDATE sessions SET state='registered', node_id=NULL, started_at=NULL, updated_at=? WHERE id=?",
                (now, session_id),
            )
            c.execute(
                "INSERT INTO transitions VALUES (?,?,?,?,?)", (session_id, s.state.value, "registered", now, cause)
            )
        return self.session(session_id)

    def fail(
        self,
        session_id: str,
        cause: str,
        status: SessionState = SessionState.ERROR,
        kind: FailureKind = FailureKind.SESSION_LOST,
    ) -> Outcome:
        """An infrastructure end (node lost, restart): final, masked so it never scores a 0 in training."""
        s = self.session(session_id)
        result = SessionResult(
            session_id=s.id,
            task_id=s.task_id,
            status=status,
            masked=True,
            node_id=s.node_id,
            error=cause,
            failure_kind=kind,
        )
        return self.record_result(result, cause)

    def next_registered(self) -> SessionRow | None:
        """The session to dispatch next: highest task priority, then oldest task, then sample order."""
        rows = self.waiting(1)
        return rows[0] if rows else None

    def waiting(self, limit: int) -> list[SessionRow]:
        """The first `limit` sessions waiting for dispatch, in `next_registered` order."""
        rows = self._read(
            f"SELECT {', '.join('s.' + c.strip() for c in _SESSION_COLS.split(','))} FROM sessions s "
            "JOIN tasks t ON t.id = s.task_id WHERE s.state='registered' AND s.node_id IS NULL "
            "ORDER BY t.priority DESC, t.created_at, s.sample_index LIMIT ?",
            (limit,),
        )
        return [_session(r) for r in rows]

    def overdue(self, now: float, grace_s: float) -> list[SessionRow]:
        """Started sessions past their task's session timeout plus a grace: their node never answered."""
        cols = ", ".join("s." + c.strip() for c in _SESSION_COLS.split(","))
        rows = self._read(
            f"SELECT {cols} FROM sessions s JOIN tasks t ON t.id = s.task_id "
            f"WHERE s.state NOT IN {_TERMINAL_SQL} AND s.started_at IS NOT NULL "
            "AND s.started_at + t.session_timeout_s + ? < ?",
            (grace_s, now),
        )
        return [_session(r) for r in rows]

    def rollup_totals(self, task_id: str) -> dict[str, float]:
        """The task's session rollups (each result's `rollup`) summed, read inside SQLite."""
        sums = ", ".join(f"TOTAL(json_extract(CAST(result AS TEXT), '$.rollup.{f}'))" for f in SUMMED)
        (row,) = self._read(f"SELECT {sums} FROM sessions WHERE task_id=? AND result IS NOT NULL", (task_id,))
        return {f: round(v, 3) if f.endswith("_s") else int(v) for f, v in zip(SUMMED, row, strict=True)}

    def counts(self, task_id: str) -> dict[str, int]:
        rows = self._read("SELECT state, COUNT(*) FROM sessions WHERE task_id=? GROUP BY state", (task_id,))
        return dict(rows)

    def recover(self, node_alive: Callable[[str], bool] = lambda node_id: False) -> list[SessionRow]:
        """Start-up: an in-flight session whose node is not known alive ends in error; returns those ended.

        The default policy trusts no node across a restart (its results would arrive for sessions we
        can no longer time out); pass `node_alive` to keep sessions of nodes that are known to live.
        Registered sessions stay registered, their dispatch forgotten, to be dispatched again.
        """
        ended = []
        for s in self._read(f"SELECT {_SESSION_COLS} FROM sessions WHERE state NOT IN {_TERMINAL_SQL}"):
            row = _session(s)
            if row.state is SessionState.REGISTERED:
                if row.node_id is not None:
                    self.requeue(row.id, "rollout server restarted before the node acknowledged")
            elif not (row.node_id and node_alive(row.node_id)):
                outcome = self.fail(row.id, "rollout server restarted")
                ended.append(outcome.session)
        return ended

    def last_activity(self) -> float:
        """When the store last changed (a transition or a heartbeat): about when a dead server stopped."""
        (row,) = self._read(
            "SELECT MAX(t) FROM (SELECT MAX(at) AS t FROM transitions UNION ALL SELECT MAX(last_heartbeat) FROM nodes)"
        )
        return row[0] or 0.0

    # --- nodes --------------------------------------------------------------------------------
    def register_node(self, reg: NodeRegistration) -> NodeRow:
        """Register or re-register (a node that restarts keeps its id); clears draining."""
        with self._tx() as c:
            c.execute(
                "INSERT INTO nodes(id, registration, metrics, last_heartbeat, draining) VALUES (?,?,?,?,0) "
                "ON CONFLICT(id) DO UPDATE SET registration=excluded.registration, metrics=excluded.metrics, "
                "last_heartbeat=excluded.last_heartbeat, draining=0",
                (reg.node_id, orjson.dumps(reg.model_dump()), orjson.dumps(NodeMetrics().model_dump()), time.time()),
            )
        return self.node(reg.node_id)

    def heartbeat(self, node_id: str, metrics: NodeMetrics) -> NodeRow:
        with self._tx() as c:
            cur = c.execute(
                "UPDATE nodes SET metrics=?, last_heartbeat=? WHERE id=?",
                (orjson.dumps(metrics.model_dump()), time.time(), node_id),
            )
            if cur.rowcount == 0:
                raise NotFound(f"no node {node_id!r}: register again (POST /nodes)")
        return self.node(node_id)

    def drain(self, node_id: str) -> NodeRow:
        with self._tx() as c:
            if c.execute("UPDATE nodes SET draining=1 WHERE id=?", (node_id,)).rowcount == 0:
                raise NotFound(f"no node {node_id!r}")
        return self.node(node_id)

    def node(self, node_id: str) -> NodeRow:
        rows = self._read(f"SELECT {_NODE_COLS} FROM nodes WHERE id=?", (node_id,))
        if not rows:
            raise NotFound(f"no node {node_id!r}")
        return _node(rows[0])

    def state_counts(self) -> dict[str, int]:
        """Every session, counted by state."""
        return dict(self._read("SELECT state, COUNT(*) FROM sessions GROUP BY state"))

    def queue_depth(self) -> int:
        """Sessions waiting for a node (registered and not dispatched)."""
        return self._read("SELECT COUNT(*) FROM sessions WHERE state='registered' AND node_id IS NULL")[0][0]

    def nodes(self) -> list[NodeRow]:
        return [_node(r) for r in self._read(f"SELECT {_NODE_COLS} FROM nodes ORDER BY id")]

    # --- helpers (inside a transaction) -------------------------------------------------------
    @staticmethod
    def _get(c: sqlite3.Connection, session_id: str) -> SessionRow:
        row = c.execute(f"SELECT {_SESSION_COLS} FROM sessions WHERE id=?", (session_id,)).fetchone()
        if row is None:
            raise NotFound(f"no session {session_id!r}")
        return _session(row)

    @staticmethod
    def _set(
        c: sqlite3.Connection,
        s: SessionRow,
        to: SessionState,
        cause: str,
        now: float,
        result: dict[str, Any] | None = None,
        node_id: str | None = None,
    ) -> None:
        c.execute(
            "UPDATE sessions SET state=?, updated_at=?, result=COALESCE(?, result), node_id=?, "
            "started_at=COALESCE(started_at, ?) WHERE id=?",
            (to.value, now, orjson.dumps(result) if result is not None else None, node_id or s.node_id, now, s.id),
        )
        c.execute("INSERT INTO transitions VALUES (?,?,?,?,?)", (s.id, s.state.value, to.value, now, cause))

    @staticmethod
    def _finish_task_if_done(c: sqlite3.Connection, task_id: str) -> bool:
        """True exactly once: in the transaction whose result made the last session final."""
        left = c.execute(
            f"SELECT COUNT(*) FROM sessions WHERE task_id=? AND state NOT IN {_TERMINAL_SQL}", (task_id,)
        ).fetchone()[0]
        if left:
            return False
        cur = c.execute(
            "UPDATE tasks SET status='completed', finished_at=? WHERE id=? AND status='running'",
            (time.time(), task_id),
        )
        return cur.rowcount == 1
