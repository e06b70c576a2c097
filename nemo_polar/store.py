"""The embedded record store: SQLite in WAL mode.

Records are queued and written by one background thread in batches, so the response path never
waits for the disk; `flush()` waits until everything queued so far is committed. A record that must be
committed before its caller goes on (the proxy holds a call's last byte until then, so a harness never
has an answer the store lacks) goes through `durable(record)`: the records of one event-loop turn are
committed together on the loop itself (one SQLite commit in WAL mode is ~0.06 ms here; handing them
to the writer thread and back cost ~0.5 ms of thread wake-ups), and only if that commit fails are they
handed to the writer, which keeps trying. A record is a row of indexed columns plus its JSON, so
readers need no schema migration to get new fields.

The writer cannot be stopped by what it is given: a record that cannot be serialised is stored as an
`error` record saying why, a failed commit is tried again (the records stay queued) and the
failure shows in `problem` (the proxy's /health, the node's heartbeat). Session keys are stored only
as SHA-256 hashes, and every `sk-polar-` key in a record's JSON is redacted, whoever's it is.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import queue
import re
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

import orjson

from .migrations import Migration, add_column, migrate, statements
from .records import CompletionRecord, Session

log = logging.getLogger("nemo_polar.store")

MIGRATIONS = [
    Migration(
        1,
        "sessions and completions",
        statements(
            "CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, api_key TEXT UNIQUE NOT NULL,"
            " created_at REAL NOT NULL, data BLOB NOT NULL)",
            "CREATE TABLE IF NOT EXISTS completions (id TEXT PRIMARY KEY, session_id TEXT NOT NULL,"
            " seq INTEGER NOT NULL, status TEXT NOT NULL, data BLOB NOT NULL)",
            "CREATE INDEX IF NOT EXISTS completions_by_session ON completions(session_id, seq)",
        ),
    ),
    Migration(2, "sessions: closed_at (a closed key is refused)", add_column("sessions", "closed_at", "REAL")),
    Migration(3, "sessions: keys kept only as hashes", lambda conn: _hash_stored_keys(conn)),
]

# Every key the proxy mints (proxy/sessions.new_key): redacted from stored JSON wherever it appears
KEY_PATTERN = re.compile(rb"sk-polar-[A-Za-z0-9_-]{32}")
REDACTED = b"[redacted]"

_FLUSH = object()
_STOP = object()
# The writer waits this long after a record before writing: a batch per wake-up instead of a
# transaction and a GIL hand-off per record, which cost the event loop a third of its time under load.
# flush(), close() and a record someone waits on cut the wait short.
_LINGER_S = 0.05
_RETRY_S = 1.0
_LOOP_BUSY_MS = 100  # the loop waits this long for another writer's lock, then hands its records on


def key_hash(api_key: str) -> str:
    return hashlib.sha256(api_key.encode()).hexdigest()


def connect(path: str | Path, read_only: bool = False) -> sqlite3.Connection:
    if read_only:  # a reader never creates, migrates or writes the file it is shown
        conn = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False)
        conn.execute("PRAGMA busy_timeout=10000")
        return conn
    conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA busy_timeout=10000")
    return conn


class SqliteStore:
    def __init__(self, path: str | Path, read_only: bool = False):
        """`read_only`: for readers (exports, `polar view`, benchmarks): the file is neither created nor
        migrated, and nothing is written (a store from an older version reads as it is)."""
        self.path = Path(path)
        self.read_only = read_only
        if read_only:
            self._read = connect(self.path, read_only=True)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._read = connect(self.path)
            migrate(self._read, MIGRATIONS, f"record store {self.path}")
        self._read_lock = threading.Lock()
        self._queue: queue.Queue = queue.Queue()
        self._hurry = threading.Event()
        self.problem: str | None = None  # why records are not being written right now
        self._closing = threading.Event()
        self._loop_conn: sqlite3.Connection | None = None  # durable(): the event loop's own writes
        self._turn: list[tuple[CompletionRecord, asyncio.Future[None]]] = []
        self._writer = threading.Thread(target=self._write_loop, name="polar-store-writer", daemon=True)
        if not read_only:
            self._writer.start()

    @property
    def healthy(self) -> bool:
        return self._writer.is_alive() and self.problem is None

    # sessions: rare and needed at once, so written synchronously
    def add_session(self, session: Session) -> None:
        with self._read_lock:
            self._read.execute(
                "INSERT INTO sessions(id, api_key, created_at, data) VALUES (?,?,?,?)",
                (
                    session.id,
                    key_hash(session.api_key),
                    session.created_at,
                    orjson.dumps(session.model_dump(exclude={"api_key"})),
                ),
            )

    def session_by_key(self, api_key: str) -> Session | None:
        """The open session this key belongs to (None once it is closed)."""
        with self._read_lock:
            row = self._read.execute(
                "SELECT data FROM sessions WHERE api_key=? AND closed_at IS NULL", (key_hash(api_key),)
            ).fetchone()
        return Session.model_validate(orjson.loads(row[0]) | {"api_key": api_key}) if row else None

    def close_session(self, session_id: str, at: float | None = None) -> None:
        with self._read_lock:
            self._read.execute(
                "UPDATE sessions SET closed_at=? WHERE id=? AND closed_at IS NULL", (at or time.time(), session_id)
            )

    def sessions(self) -> list[Session]:
        """Every session (open or closed); keys are not kept, so `api_key` is empty."""
        with self._read_lock:
            rows = self._read.execute("SELECT data FROM sessions ORDER BY created_at").fetchall()
        return [Session.model_validate(orjson.loads(r[0])) for r in rows]

    # records: queued, written in batches off the response path
    def add_record(self, record: CompletionRecord, on_commit: Callable[[], None] | None = None) -> None:
        self._queue.put((record, on_commit))
        if on_commit is not None:
            self._hurry.set()

    def durable(self, record: CompletionRecord) -> asyncio.Future[None]:
        """Store `record`; the future is done once it is committed. Call from the event loop."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if not self._turn:
            loop.call_soon(self._commit_turn)
        self._turn.append((record, future))
        return future

    def _commit_turn(self) -> None:
        turn, self._turn = self._turn, []
        try:
            if self._loop_conn is None:
                self._loop_conn = connect(self.path)
                self._loop_conn.execute(f"PRAGMA busy_timeout={_LOOP_BUSY_MS}")  # never hold the loop for long
            with self._loop_conn as conn:
                conn.execute("BEGIN")
                conn.executemany(_INSERT, [_row(record) for record, _ in turn])
        except sqlite3.Error as exc:  # the writer keeps trying; the callers wait for it
            log.warning("committing %d records on the loop failed (%s): handed to the writer", len(turn), exc)
            for record, future in turn:
                self.add_record(record, functools.partial(_resolve_threadsafe, future))
            return
        for _, future in turn:
            if not future.done():
                future.set_result(None)

    def records(self, session_id: str | None = None) -> list[CompletionRecord]:
        with self._read_lock:
            if session_id is None:
                rows = self._read.execute("SELECT data FROM completions ORDER BY session_id, seq").fetchall()
            else:
                rows = self._read.execute(
                    "SELECT data FROM completions WHERE session_id=? ORDER BY seq", (session_id,)
                ).fetchall()
        return [CompletionRecord.model_validate(orjson.loads(r[0])) for r in rows]

    def max_seq(self, session_id: str) -> int:
        with self._read_lock:
            row = self._read.execute("SELECT MAX(seq) FROM completions WHERE session_id=?", (session_id,)).fetchone()
        return -1 if row[0] is None else row[0]

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until everything queued so far is committed; False if that did not happen in time."""
        if not self._writer.is_alive():
            return False
        done = threading.Event()
        self._queue.put((_FLUSH, done.set))
        self._hurry.set()
        return done.wait(timeout_s)

    def close(self) -> None:
        self._closing.set()
        if self._writer.is_alive():
            self._queue.put((_STOP, None))
            self._hurry.set()
            self._writer.join()
        if self._loop_conn is not None:
            self._loop_conn.close()
        self._read.close()

    def _write_loop(self) -> None:
        conn = connect(self.path)
        stop = False
        while not stop:
            batch = [self._queue.get()]
            self._hurry.wait(_LINGER_S)
            self._hurry.clear()
            while True:  # drain whatever else is waiting into the same transaction
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            rows, callbacks = [], []
            for item, callback in batch:
                if item is _STOP:
                    stop = True
                elif item is not _FLUSH:
                    rows.append(_row(item))
                if callback is not None:
                    callbacks.append(callback)
            self._commit(conn, rows, stop)
            for callback in callbacks:
                try:
                    callback()
                except Exception:  # noqa: BLE001 - a waiter's failure is its own
                    log.exception("a record's commit callback failed")
        conn.close()

    def _commit(self, conn: sqlite3.Connection, rows: list[tuple], stopping: bool) -> None:
        """Commit `rows`, trying again while the database refuses (disk full, locked) until the store
        is closed: they stay queued."""
        while rows:
            try:
                with conn:
                    conn.execute("BEGIN")
                    conn.executemany(_INSERT, rows)
                self.problem = None
                return
            except sqlite3.Error as exc:
                self.problem = f"records cannot be written: {exc}"
                log.error("%s; %d records kept, trying again in %.0f s", self.problem, len(rows), _RETRY_S)
                if stopping or self._closing.wait(_RETRY_S):
                    return


_INSERT = "INSERT OR REPLACE INTO completions(id, session_id, seq, status, data) VALUES (?,?,?,?,?)"


def _resolve_threadsafe(future: asyncio.Future[None]) -> None:
    """From the writer thread: the record is committed."""
    future.get_loop().call_soon_threadsafe(_resolve, future)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():  # the call may have been cancelled meanwhile
        future.set_result(None)


def _row(record: CompletionRecord) -> tuple:
    try:
        data = _json(record)
    except Exception as exc:  # noqa: BLE001 - whatever the record holds, the writer goes on
        data = _json(_unstorable(record, exc))
    return (record.id, record.session_id, record.seq, record.status, KEY_PATTERN.sub(REDACTED, data))


def _unstorable(record: CompletionRecord, exc: Exception) -> CompletionRecord:
    """What is left of a record that cannot be serialised: the call, its tokens and why (not trainable)."""
    why = f"the record could not be stored as given ({type(exc).__name__}: {str(exc)[:200]}); bodies dropped"
    return record.model_copy(
        update={
            "native_request": {},
            "upstream_request": None,
            "message": None,
            "status": "error",
            "error": why if record.error is None else f"{record.error}; {why}",
        }
    )


def _json(record: CompletionRecord) -> bytes:
    # pydantic-core straight to JSON bytes: a third cheaper than model_dump() then orjson
    return record.__pydantic_serializer__.to_json(record)


def _hash_stored_keys(conn: sqlite3.Connection) -> None:
    for sid, key, data in conn.execute("SELECT id, api_key, data FROM sessions").fetchall():
        if key.startswith("sk-"):  # a plaintext key from before hashing
            doc = orjson.loads(data)
            doc.pop("api_key", None)
            conn.execute("UPDATE sessions SET api_key=?, data=? WHERE id=?", (key_hash(key), orjson.dumps(doc), sid))
