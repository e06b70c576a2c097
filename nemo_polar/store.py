"""The embedded record store: SQLite in WAL mode.

Records are queued and written by one background thread in batches, so the response path never
waits for the disk; `flush()` waits until everything queued so far is committed. A record that must be
committed before its caller goes on (the proxy holds a call's last byte until then, so a harness never
has an answer the store lacks) goes through `durable(record)`: the records of one event-loop turn are
committed together on the loop itself (one SQLite commit in WAL mode is ~0.06 ms here; handing them
to the writer thread and back cost ~0.5 ms of thread wake-ups), and only if that commit fails are they
handed to the writer, which keeps trying. A record is stored as what its call added to its session, the
rest by reference (`record_codec.py`: a session's messages once, prompt ids as a reference plus a tail,
packed arrays), so a session's storage grows with its length, not with its square; readers get whole
`CompletionRecord`s back. A record is a row of indexed columns plus a JSON document, so readers need no
schema migration to get new fields.

The writer cannot be stopped by what it is given: a record that cannot be serialised is stored as an
`error` record saying why, a failed commit is tried again (the records stay queued) and the
failure shows in `problem` (the proxy's /health, the node's heartbeat). Session keys are stored only
as SHA-256 hashes, and every `sk-polar-` key in a record's JSON is redacted, whoever's it is.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from .migrations import Migration, add_column, migrate, open_read_only, statements
from .record_codec import Bodies, Decoder, Encoded, Encoder, lengths, unsqueeze
from .records import CompletionRecord, Session
from .session_cache import SessionCache

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
    Migration(4, "records by reference: parts stored once per session", lambda conn: _by_reference(conn)),
]

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


def connect(path: str | Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA busy_timeout=10000")
    return conn


class SqliteStore:
    def __init__(self, path: str | Path, read_only: bool = False, cache: SessionCache | None = None):
        """`read_only`: for readers (exports, `polar view`, benchmarks): the file is neither created nor
        migrated, and nothing is written (a store from an older version reads as it is). `cache`: where
        each session's last records are kept for its next one to refer to (the proxy's session cache)."""
        self.path = Path(path)
        self.read_only = read_only
        if read_only:
            self._read = open_read_only(self.path)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._read = connect(self.path)
            migrate(self._read, MIGRATIONS, f"record store {self.path}")
        # a store from before records by reference, shown read-only: its rows are whole records
        self._by_reference = "tokens" in {row[1] for row in self._read.execute("PRAGMA table_info(completions)")}
        self._read_lock = threading.Lock()
        self.cache = cache if cache is not None else SessionCache()
        self._encoder = Encoder(self.cache)
        self._queue: queue.Queue = queue.Queue()
        self._hurry = threading.Event()
        self.problem: str | None = None  # why records are not being written right now
        self._closing = threading.Event()
        self._loop_conn: sqlite3.Connection | None = None  # durable(): the event loop's own writes
        self._turn: list[tuple[CompletionRecord, Bodies | None, asyncio.Future[None]]] = []
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
        self._encoder.forget(session_id)

    def sessions(self) -> list[Session]:
        """Every session (open or closed); keys are not kept, so `api_key` is empty."""
        with self._read_lock:
            rows = self._read.execute("SELECT data FROM sessions ORDER BY created_at").fetchall()
        return [Session.model_validate(orjson.loads(r[0])) for r in rows]

    # records: queued, written in batches off the response path
    def prepare(self, session_id: str, record_id: str, native: Any, upstream: Any) -> Bodies | None:
        """A call's bodies encoded before its record exists, and the history items they add committed
        (the proxy does both on the loop while the upstream works: what is left for the record's own
        commit, once the answer is in, is one small row); pass it with the record. None when they
        cannot be encoded: the record is then stored as it can be."""
        try:
            bodies = self._encoder.bodies(session_id, record_id, native, upstream)
        except Exception:  # noqa: BLE001 - the record's own encoding decides what is stored
            return None
        if not bodies.parts:
            return bodies
        try:
            with self._loop_connection() as conn:
                conn.execute("BEGIN")
                conn.executemany(_INSERT_PART, bodies.parts)
        except sqlite3.Error:
            return bodies  # the record's transaction stores them
        self._encoder.stored(session_id, [p[1] for p in bodies.parts])
        return dataclasses.replace(bodies, parts=[])

    def _loop_connection(self) -> sqlite3.Connection:
        if self._loop_conn is None:
            self._loop_conn = connect(self.path)
            self._loop_conn.execute(f"PRAGMA busy_timeout={_LOOP_BUSY_MS}")  # never hold the loop for long
        return self._loop_conn

    def add_record(
        self, record: CompletionRecord, on_commit: Callable[[], None] | None = None, bodies: Bodies | None = None
    ) -> None:
        self._queue.put(((record, bodies), on_commit))
        if on_commit is not None:
            self._hurry.set()

    def durable(self, record: CompletionRecord, bodies: Bodies | None = None) -> asyncio.Future[None]:
        """Store `record`; the future is done once it is committed. Call from the event loop."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if not self._turn:
            loop.call_soon(self._commit_turn)
        self._turn.append((record, bodies, future))
        return future

    def _commit_turn(self) -> None:
        turn, self._turn = self._turn, []
        encoded: list[Encoded] = []
        for record, bodies, _ in turn:
            encoded.append(self._encode(record, bodies, encoded))
        try:
            with self._loop_connection() as conn:
                conn.execute("BEGIN")
                _insert(conn, encoded)
        except sqlite3.Error as exc:  # the writer keeps trying; the callers wait for it
            log.warning("committing %d records on the loop failed (%s): handed to the writer", len(turn), exc)
            for done, (_, _, future) in zip(encoded, turn, strict=True):
                self._queue.put((done, functools.partial(_resolve_threadsafe, future)))
            self._hurry.set()
            return
        for done in encoded:
            self._encoder.committed(done)
        for _, _, future in turn:
            if not future.done():
                future.set_result(None)

    def records(self, session_id: str | None = None) -> list[CompletionRecord]:
        """Whole records, in each session's order of arrival (`seq`)."""
        tokens = "tokens" if self._by_reference else "NULL"
        with self._read_lock:
            if session_id is None:
                rows = self._read.execute(
                    f"SELECT session_id, data, {tokens} FROM completions ORDER BY session_id, rowid"
                ).fetchall()
            else:
                rows = self._read.execute(
                    f"SELECT session_id, data, {tokens} FROM completions WHERE session_id=? ORDER BY rowid",
                    (session_id,),
                ).fetchall()
            parts = self._parts(session_id) if any(r[2] is not None for r in rows) else {}
        out: list[CompletionRecord] = []
        decoders: dict[str, Decoder] = {}
        for sid, data, blob in rows:  # in the order written: a record refers only to earlier ones
            decoder = decoders.get(sid)
            if decoder is None:
                decoder = decoders[sid] = Decoder(parts.get(sid, {}))
            out.append(decoder.record(data, blob))
        out.sort(key=lambda r: (r.session_id, r.seq))
        return out

    def _parts(self, session_id: str | None) -> dict[str, dict[bytes, bytes]]:
        if session_id is None:
            rows = self._read.execute("SELECT session_id, hash, data FROM parts").fetchall()
        else:
            rows = self._read.execute("SELECT session_id, hash, data FROM parts WHERE session_id=?", (session_id,))
        out: dict[str, dict[bytes, bytes]] = {}
        for sid, digest, data in rows:
            out.setdefault(sid, {})[digest] = data
        return out

    def call_rows(self, session_ids: list[str]) -> dict[str, list[tuple[str, int, int, float, float]]]:
        """What a rollup needs of each call (`rollup.rollup_rows`), by session, without decoding bodies:
        the viewer asks this of thousands of calls."""
        out: dict[str, list[tuple[str, int, int, float, float]]] = {sid: [] for sid in session_ids}
        marks = ",".join("?" * len(session_ids))
        tokens = "tokens" if self._by_reference else "NULL"
        with self._read_lock:
            rows = self._read.execute(
                f"SELECT session_id, data, {tokens} FROM completions WHERE session_id IN ({marks})", session_ids
            ).fetchall()
        for sid, data, blob in rows:
            r = orjson.loads(unsqueeze(data))
            usage = r.get("usage") or {}
            if blob is None:
                prompt, completion = len(r.get("prompt_token_ids") or ()), len(r.get("completion_token_ids") or ())
            else:
                prompt, completion = lengths((r.get("prompt") or (None, 0))[1], blob)
            prompt = prompt or usage.get("prompt_tokens", 0)
            completion = completion or usage.get("completion_tokens", 0)
            out[sid].append((r["status"], prompt, completion, r["started_at"], r["finished_at"]))
        return out

    def last_change(self) -> int:
        """Grows whenever a record is added: readers compare it to know when to read again."""
        with self._read_lock:
            return self._read.execute("SELECT COALESCE(MAX(rowid), 0) FROM completions").fetchone()[0]

    def max_seq(self, session_id: str) -> int:
        with self._read_lock:
            row = self._read.execute("SELECT MAX(seq) FROM completions WHERE session_id=?", (session_id,)).fetchone()
        return -1 if row[0] is None else row[0]

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until everything queued so far is committed; False if that did not happen in time."""
        if self.read_only:
            return True
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
            encoded, callbacks = [], []
            for item, callback in batch:
                if item is _STOP:
                    stop = True
                elif isinstance(item, Encoded):  # encoded already: handed on by the loop
                    encoded.append(item)
                elif item is not _FLUSH:
                    encoded.append(self._encode(*item, encoded))
                if callback is not None:
                    callbacks.append(callback)
            self._commit(conn, encoded, stop)
            for callback in callbacks:
                try:
                    callback()
                except Exception:  # noqa: BLE001 - a waiter's failure is its own
                    log.exception("a record's commit callback failed")
        conn.close()

    def _commit(self, conn: sqlite3.Connection, encoded: list[Encoded], stopping: bool) -> None:
        """Commit `encoded`, trying again while the database refuses (disk full, locked) until the store
        is closed: they stay queued."""
        while encoded:
            try:
                with conn:
                    conn.execute("BEGIN")
                    _insert(conn, encoded)
                self.problem = None
                for done in encoded:
                    self._encoder.committed(done)
                return
            except sqlite3.Error as exc:
                self.problem = f"records cannot be written: {exc}"
                log.error("%s; %d records kept, trying again in %.0f s", self.problem, len(encoded), _RETRY_S)
                if stopping or self._closing.wait(_RETRY_S):
                    return

    def _encode(self, record: CompletionRecord, bodies: Bodies | None, along: list[Encoded]) -> Encoded:
        """`along`: the records before it in the same transaction, which it may refer to."""
        try:
            return self._encoder.encode(record, bodies, along)
        except Exception as exc:  # noqa: BLE001 - whatever the record holds, the writer goes on
            return self._encoder.encode(_unstorable(record, exc), None, along)


_INSERT = "INSERT OR REPLACE INTO completions(id, session_id, seq, status, data, tokens) VALUES (?,?,?,?,?,?)"
_INSERT_PART = "INSERT OR IGNORE INTO parts(session_id, hash, data) VALUES (?,?,?)"


def _insert(conn: sqlite3.Connection, encoded: list[Encoded]) -> None:
    """Records and the parts they add, in one transaction (the caller's): a record is never stored
    without what it refers to."""
    parts = [p for e in encoded for p in e.parts]
    if parts:  # most records bring none: the proxy committed them while the upstream worked
        conn.executemany(_INSERT_PART, parts)
    conn.executemany(_INSERT, [e.row for e in encoded])


def _resolve_threadsafe(future: asyncio.Future[None]) -> None:
    """From the writer thread: the record is committed."""
    future.get_loop().call_soon_threadsafe(_resolve, future)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():  # the call may have been cancelled meanwhile
        future.set_result(None)


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


def _hash_stored_keys(conn: sqlite3.Connection) -> None:
    for sid, key, data in conn.execute("SELECT id, api_key, data FROM sessions").fetchall():
        if key.startswith("sk-"):  # a plaintext key from before hashing
            doc = orjson.loads(data)
            doc.pop("api_key", None)
            conn.execute("UPDATE sessions SET api_key=?, data=? WHERE id=?", (key_hash(key), orjson.dumps(doc), sid))


def _by_reference(conn: sqlite3.Connection) -> None:
    """Whole records rewritten as what each call added (record_codec.py), session by session in the order
    they were written; a row that no longer reads as a record is left whole (readers still take it)."""
    add_column("completions", "tokens", "BLOB")(conn)
    conn.execute(
        "CREATE TABLE IF NOT EXISTS parts (session_id TEXT NOT NULL, hash BLOB NOT NULL, data BLOB NOT NULL,"
        " PRIMARY KEY (session_id, hash)) WITHOUT ROWID"
    )
    encoder = Encoder()
    sessions = conn.execute("SELECT DISTINCT session_id FROM completions WHERE tokens IS NULL").fetchall()
    for (sid,) in sessions:  # a session at a time: a store of long sessions is never in memory at once
        rows = conn.execute(
            "SELECT rowid, data FROM completions WHERE session_id=? AND tokens IS NULL ORDER BY rowid", (sid,)
        )
        for rowid, data in rows.fetchall():
            try:
                record = CompletionRecord.model_validate_json(data)
            except ValueError:
                log.warning("stored record %s does not read as a record: kept whole", rowid)
                continue
            done = encoder.encode(record)
            conn.executemany(_INSERT_PART, done.parts)
            conn.execute("UPDATE completions SET data=?, tokens=? WHERE rowid=?", (done.row[4], done.row[5], rowid))
            encoder.committed(done)
        encoder.forget(sid)
