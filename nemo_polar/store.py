"""The embedded record store: SQLite in WAL mode.

Records are queued and written by one background thread in batches, so the response path never
waits for the disk; `flush()` waits until everything queued so far is committed. A record is a
row of indexed columns plus its JSON, so readers need no schema migration to get new fields.
"""

from __future__ import annotations

import queue
import sqlite3
import threading
from pathlib import Path

import orjson

from .records import CompletionRecord, Session

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
  id TEXT PRIMARY KEY,
  api_key TEXT UNIQUE NOT NULL,
  created_at REAL NOT NULL,
  data BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS completions (
  id TEXT PRIMARY KEY,
  session_id TEXT NOT NULL,
  seq INTEGER NOT NULL,
  status TEXT NOT NULL,
  data BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS completions_by_session ON completions(session_id, seq);
"""

_FLUSH = object()
_STOP = object()
# The writer waits this long after a record before writing: a batch per wake-up instead of a
# transaction and a GIL hand-off per record, which cost the event loop a third of its time under load.
# flush() and close() cut the wait short.
_LINGER_S = 0.05


def connect(path: str | Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA busy_timeout=10000")
    return conn


class SqliteStore:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._read = connect(self.path)
        self._read.executescript(_SCHEMA)
        self._read_lock = threading.Lock()
        self._queue: queue.Queue = queue.Queue()
        self._hurry = threading.Event()
        self._writer = threading.Thread(target=self._write_loop, name="polar-store-writer", daemon=True)
        self._writer.start()

    # sessions: rare and needed at once, so written synchronously
    def add_session(self, session: Session) -> None:
        with self._read_lock:
            self._read.execute(
                "INSERT INTO sessions(id, api_key, created_at, data) VALUES (?,?,?,?)",
                (session.id, session.api_key, session.created_at, orjson.dumps(session.model_dump())),
            )

    def session_by_key(self, api_key: str) -> Session | None:
        with self._read_lock:
            row = self._read.execute("SELECT data FROM sessions WHERE api_key=?", (api_key,)).fetchone()
        return Session.model_validate(orjson.loads(row[0])) if row else None

    def sessions(self) -> list[Session]:
        with self._read_lock:
            rows = self._read.execute("SELECT data FROM sessions ORDER BY created_at").fetchall()
        return [Session.model_validate(orjson.loads(r[0])) for r in rows]

    # records: queued, written in batches off the response path
    def add_record(self, record: CompletionRecord) -> None:
        self._queue.put(record)

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

    def flush(self) -> None:
        done = threading.Event()
        self._queue.put((_FLUSH, done))
        self._hurry.set()
        done.wait()

    def close(self) -> None:
        if self._writer.is_alive():
            self._queue.put(_STOP)
            self._hurry.set()
            self._writer.join()
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
            rows, waiters = [], []
            for item in batch:
                if item is _STOP:
                    stop = True
                elif isinstance(item, tuple) and item[0] is _FLUSH:
                    waiters.append(item[1])
                else:
                    rows.append((item.id, item.session_id, item.seq, item.status, _json(item)))
            if rows:
                with conn:
                    conn.execute("BEGIN")
                    conn.executemany(
                        "INSERT OR REPLACE INTO completions(id, session_id, seq, status, data) VALUES (?,?,?,?,?)",
                        rows,
                    )
            for w in waiters:
                w.set()
        conn.close()


def _json(record: CompletionRecord) -> bytes:
    # pydantic-core straight to JSON bytes: a third cheaper than model_dump() then orjson
    return record.__pydantic_serializer__.to_json(record)
