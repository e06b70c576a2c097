"""Where the page's sessions and calls come from.

    RunSource       a run folder (`polar up`, `polar learn`: rollout.sqlite + records.sqlite), or a
                    rollout store with the record store beside it
    RecordsSource   a record store alone (`polar proxy`): its capture sessions, no tasks or rewards
    RolloutSource   a running rollout server (remote.py), through the control-plane client

Each answers the same three questions (`Source`): the listing (tasks and their sessions), one
session's row and records, and a version that changes whenever something the page shows may have
(the page is told, and asks again).
Stores are read, never written: records through the record store's read API opened read-only, the
rollout store through its own class (which brings an older schema forward when opened, as every polar
command does). A task's secrets are masked in what the page shows of it (`redaction.Secrets`; a rollout
server's answers come masked).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

from ..contracts import TaskSpec
from ..errors import NotFound
from ..records import CompletionRecord
from ..rollup import kept, rollup_rows, view
from ..store import SqliteStore


class Source(Protocol):
    label: str
    kind: str  # run | store | rollout
    model_dir: str | None  # a model folder the run keeps (polar learn's policy/), for its tokenizer

    async def listing(self) -> list[dict[str, Any]]: ...
    async def session(self, session_id: str) -> tuple[dict[str, Any], list[CompletionRecord]]: ...
    async def version(self) -> str: ...
    async def close(self) -> None: ...


# --- the rows the page lists ------------------------------------------------------------------


def task_entry(task_id: str, status: str, spec: TaskSpec | dict[str, Any] | None, created_at: float | None):
    """A task's header in the listing: its plug-ins and its prompt, from its spec."""
    s = spec.model_dump(mode="json") if isinstance(spec, TaskSpec) else (spec or {})
    harness = s.get("harness") or {}
    variant = harness.get("dialect")
    return {
        "task_id": task_id,
        "status": status,
        "created_at": created_at,
        "harness": (harness.get("name") or "") + (f" ({variant})" if variant else ""),
        "runtime": (s.get("runtime") or {}).get("kind"),
        "builder": s.get("builder") or "prefix_tree",
        "evaluator": (s.get("evaluator") or {}).get("kind"),
        "num_samples": s.get("num_samples"),
        "instruction": (s.get("instruction") or "")[:300],
        "sessions": [],
    }


def session_row(task: dict[str, Any], s: dict[str, Any], cached: dict[str, Any] | None = None) -> dict[str, Any]:
    """A session in the listing (`s`: the rollout server's session JSON); its rollup is the one kept with
    its result, else `cached` (computed here from its records) with the build's trained-token count."""
    result = s.get("result") or {}
    stats = result.get("stats") or {}
    # kept with the result; else computed here from the records; else what the build stats say
    shown = result.get("rollup") or (cached and cached | {"trained_tokens": stats.get("trained_tokens")})
    shown = shown or kept(result)
    return {
        "session_id": s["session_id"],
        "task_id": s["task_id"],
        "sample_index": s.get("sample_index"),
        "state": s["state"],
        "node_id": s.get("node_id"),
        "updated_at": s.get("updated_at"),
        "harness": task.get("harness"),
        "runtime": task.get("runtime"),
        "builder": task.get("builder"),
        "reward": result.get("reward"),
        "masked": bool(result.get("masked")),
        "error": result.get("error"),
        "proxy_session_id": result.get("proxy_session_id"),
        "traces": stats.get("traces"),
        "rollup": view(shown, result.get("timing")) if (shown or result) else None,
        "final": bool(result.get("status")),
    }


# --- reading the record store -----------------------------------------------------------------


class Records:
    """A record store through its own read API (`SqliteStore`, opened read-only: the file shown is never
    migrated or written, and a store from an older version reads as it is)."""

    def __init__(self, path: Path):
        self.path = path
        self.store = SqliteStore(path, read_only=True)

    def records(self, proxy_session_id: str) -> list[CompletionRecord]:
        return self.store.records(proxy_session_id)

    def capture_sessions(self) -> list[dict[str, Any]]:
        """The proxy's sessions, without their keys."""
        return [{"id": s.id, "created_at": s.created_at, "metadata": s.metadata} for s in self.store.sessions()]

    def proxy_session_of(self, rollout_session_id: str) -> str | None:
        """The capture session a gateway node opened for a rollout session (its metadata names it)."""
        for s in self.capture_sessions():
            if s["metadata"].get("rollout_session") == rollout_session_id:
                return s["id"]
        return None

    def call_rows(self, proxy_session_ids: list[str]) -> dict[str, list[tuple[str, int, int, float, float]]]:
        """What a rollup needs of each call, by capture session, without reading whole records."""
        return self.store.call_rows(proxy_session_ids)

    def last_change(self) -> int:
        return self.store.last_change()

    def close(self) -> None:
        self.store.close()


class RollupCache:
    """Rollups computed from the records, for sessions whose result does not carry one (runs from before
    rollups, a record store alone): asked for by the listing, computed on a thread, a batch at a time,
    so a store of many calls lists at once and fills in. `generation` counts finished batches."""

    BATCH = 256

    def __init__(self, records: Records, on_batch: Callable[[], None] = lambda: None):
        self.records = records
        self.generation = 0
        self._done: dict[str, dict[str, Any]] = {}
        self._wanted: list[str] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._on_batch = on_batch
        self._stop = False
        self._thread = threading.Thread(target=self._loop, name="polar-view-rollups", daemon=True)
        self._thread.start()

    def get(self, proxy_session_id: str | None) -> dict[str, Any] | None:
        return self._done.get(proxy_session_id) if proxy_session_id else None

    def want(self, proxy_session_ids: Iterable[str]) -> None:
        with self._lock:
            queued = set(self._wanted)
            new = [s for s in proxy_session_ids if s not in self._done and s not in queued]
            self._wanted += new
        if new:
            self._wake.set()

    def close(self) -> None:
        self._stop = True
        self._wake.set()
        self._thread.join(5)

    def _loop(self) -> None:
        while not self._stop:
            self._wake.wait()
            with self._lock:
                batch, self._wanted = self._wanted[: self.BATCH], self._wanted[self.BATCH :]
                if not self._wanted:
                    self._wake.clear()
            if not batch or self._stop:
                continue
            for sid, rows in self.records.call_rows(batch).items():
                self._done[sid] = rollup_rows(rows).model_dump()
            self.generation += 1
            self._on_batch()


# --- a run folder, or a rollout store -----------------------------------------------------------


class RunSource:
    kind = "run"

    def __init__(self, rollout_path: Path, records_path: Path | None):
        from ..server.rollout.store import RolloutStore

        if not rollout_path.is_file():
            raise FileNotFoundError(f"no rollout store at {rollout_path}")
        self.label = str(rollout_path.parent if rollout_path.name == "rollout.sqlite" else rollout_path)
        policy = rollout_path.parent / "policy"  # polar learn keeps the model it trains
        self.model_dir = str(policy) if (policy / "tokenizer.json").is_file() else None
        self.store = RolloutStore(rollout_path, read_only=True)
        self.records = Records(records_path) if records_path is not None and records_path.is_file() else None
        self.rollups = RollupCache(self.records) if self.records is not None else None

    async def listing(self) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self._listing)

    def _listing(self) -> list[dict[str, Any]]:
        tasks, secrets = {}, {}
        for t in self.store.tasks():
            secrets[t.id] = t.spec.secrets
            tasks[t.id] = secrets[t.id].scrub(task_entry(t.id, t.status, t.spec, t.created_at))
        missing = []
        for s in self.store.sessions():
            task = tasks.get(s.task_id)
            if task is None:
                continue
            body = s.as_json()
            result = body["result"] or {}
            psid = result.get("proxy_session_id")
            if self.rollups is not None and psid and not result.get("rollup") and self.rollups.get(psid) is None:
                missing.append(psid)
            row = session_row(task, body, self.rollups.get(psid) if self.rollups else None)
            task["sessions"].append(secrets[s.task_id].scrub(row))
        if missing and self.rollups is not None:
            self.rollups.want(missing)
        return list(tasks.values())

    async def session(self, session_id: str) -> tuple[dict[str, Any], list[CompletionRecord]]:
        return await asyncio.to_thread(self._session, session_id)

    def _session(self, session_id: str) -> tuple[dict[str, Any], list[CompletionRecord]]:
        s = self.store.session(session_id)
        t = self.store.task(s.task_id)
        row = session_row(task_entry(t.id, t.status, t.spec, t.created_at), s.as_json())
        moves = self.store.transitions(session_id)
        row |= {"result": s.result, "instruction": t.spec.instruction, "transitions": moves}
        row = t.spec.secrets.scrub(row)  # a result's text may repeat a secret of its task
        if self.records is None:
            return row, []
        psid = row["proxy_session_id"] or self.records.proxy_session_of(session_id)  # live: no result yet
        return row, self.records.records(psid) if psid else []

    async def version(self) -> str:
        return await asyncio.to_thread(self._version)

    def _version(self) -> str:
        moves = self.store.last_change()
        calls = self.records.last_change() if self.records else 0
        return f"{moves}.{calls}.{self.rollups.generation if self.rollups else 0}"

    async def close(self) -> None:
        if self.rollups is not None:
            self.rollups.close()
        if self.records is not None:
            self.records.close()
        self.store.close()


# --- a record store alone -----------------------------------------------------------------------


class RecordsSource:
    """The proxy's capture sessions, grouped by the task their metadata names (else one group)."""

    kind = "store"
    model_dir = None

    def __init__(self, path: Path):
        self.label = str(path)
        self.records = Records(path)
        self.rollups = RollupCache(self.records)

    async def listing(self) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self._listing)

    def _listing(self) -> list[dict[str, Any]]:
        captures = self.records.capture_sessions()
        self.rollups.want(c["id"] for c in captures)
        tasks: dict[str, dict[str, Any]] = {}
        for c in captures:
            task_id = str(c["metadata"].get("task_id") or "(no task)")
            task = tasks.setdefault(task_id, task_entry(task_id, "recorded", None, c["created_at"]))
            task["sessions"].append(session_row(task, self._as_session(c, task_id), self.rollups.get(c["id"])))
        return list(tasks.values())

    @staticmethod
    def _as_session(c: dict[str, Any], task_id: str) -> dict[str, Any]:
        return {
            "session_id": c["id"],
            "task_id": task_id,
            "sample_index": c["metadata"].get("sample"),
            "state": "recorded",
            "updated_at": c["created_at"],
            "result": {"proxy_session_id": c["id"]},
        }

    async def session(self, session_id: str) -> tuple[dict[str, Any], list[CompletionRecord]]:
        return await asyncio.to_thread(self._session, session_id)

    def _session(self, session_id: str) -> tuple[dict[str, Any], list[CompletionRecord]]:
        for c in self.records.capture_sessions():
            if c["id"] == session_id:
                task_id = str(c["metadata"].get("task_id") or "(no task)")
                row = session_row(task_entry(task_id, "recorded", None, None), self._as_session(c, task_id))
                return row | {"metadata": c["metadata"]}, self.records.records(session_id)
        raise NotFound(f"no session {session_id!r} in {self.label}")

    async def version(self) -> str:
        return f"{await asyncio.to_thread(self.records.last_change)}.{self.rollups.generation}"

    async def close(self) -> None:
        self.rollups.close()
        self.records.close()


def open_source(run_dir: str | None = None, store: str | None = None) -> Source:
    """A run folder, or a store file: a rollout store (its record store beside it) or a record store."""
    if run_dir is not None:
        folder = Path(run_dir)
        if not (folder / "rollout.sqlite").is_file():
            raise FileNotFoundError(f"{folder} is not a run folder: no rollout.sqlite in it")
        return RunSource(folder / "rollout.sqlite", folder / "records.sqlite")
    assert store is not None
    path = Path(store)
    if not path.is_file():
        raise FileNotFoundError(f"no store at {path}")
    from ..server.rollout.store import RolloutStore

    if RolloutStore.holds(path):
        return RunSource(path, path.parent / "records.sqlite")
    return RecordsSource(path)
