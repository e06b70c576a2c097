"""Records by reference: what the store keeps of a long session grows with it, and every reader gets
back, byte for byte, the records that were written (also from stores written before, migrated or not)."""

from __future__ import annotations

import asyncio
import random
import sqlite3

import orjson
import pytest

from nemo_polar.bench.merge_corpus import generate, qwen_tokenizer
from nemo_polar.migrations import migrate, version
from nemo_polar.record_codec import KEY_PATTERN, REDACTED, Encoder, StoredRecordError, _Memory, _prefix, unsqueeze
from nemo_polar.records import CompletionRecord, UpstreamInfo
from nemo_polar.store import MIGRATIONS, SqliteStore, connect

UP = UpstreamInfo(engine="vllm", url="http://127.0.0.1:8000", model="m")
KEY = "sk-polar-" + "A" * 32


def as_written(r: CompletionRecord) -> bytes:
    """A record as the store promised to give it back before records were stored by reference: its whole
    JSON, keys redacted."""
    return KEY_PATTERN.sub(REDACTED, r.__pydantic_serializer__.to_json(r))


def call(seq: int, messages: list, prompt: list[int], sampled: list[int], **extra) -> CompletionRecord:
    native = {"model": "m", "messages": messages, "stream": False} | extra.pop("native", {})
    session_id = extra.pop("session_id", "s")
    return CompletionRecord(
        id=f"{session_id}{seq:04d}",
        session_id=session_id,
        seq=seq,
        started_at=1000.0 + seq,
        finished_at=1000.5 + seq,
        dialect="openai_chat",
        stream=False,
        native_request=native,
        upstream_request={"model": "m", "messages": [dict(m, upstream=True) for m in messages], "logprobs": True},
        prompt_token_ids=prompt,
        completion_token_ids=sampled,
        completion_logprobs=[-0.5 - i / 7 for i in range(len(sampled))],
        finish_reason="stop",
        message={"content": "ok", "reasoning": None, "tool_calls": []},
        usage={"prompt_tokens": len(prompt), "completion_tokens": len(sampled)},
        upstream=UP,
        **extra,
    )


def growing(turns: int, session_id: str = "s") -> list[CompletionRecord]:
    """A session whose history grows by an assistant turn and a 2 KB tool result per call."""
    messages: list = [{"role": "system", "content": "be brief " * 100}, {"role": "user", "content": "fix it"}]
    prompt: list[int] = list(range(100, 700))  # past SHORT_PROMPT: stored by reference from the first call
    out = []
    for t in range(turns):
        sampled = [5000 + t, 6000 + t, 7]
        out.append(call(t, list(messages), list(prompt), sampled, session_id=session_id))
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{t}", "function": {"name": "sh"}}]},
            {
                "role": "tool",
                "tool_call_id": f"c{t}",
                "content": f"{t}: " + "".join(chr(97 + (t * i) % 26) for i in range(2000)),
            },
        ]
        prompt = prompt + sampled + list(range(t * 500, t * 500 + 480))
    return out


def store_size(path) -> int:
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def test_generated_sessions_read_back_byte_for_byte(tmp_path):
    """Sub-agents interleaved, compaction, template drift, failed calls: the simulator's corpus."""
    cases = generate(3, 1, qwen_tokenizer())
    written = [r for case in cases for r in case.records]
    store = SqliteStore(tmp_path / "r.sqlite")
    for r in written:
        store.add_record(r)
    assert store.flush(30)
    back = store.records()
    store.close()
    expected = sorted(written, key=lambda r: (r.session_id, r.seq))
    assert [as_written(r) for r in back] == [as_written(r) for r in expected]
    for case in cases:  # one session at a time, and read-only, the same
        sid = case.records[0].session_id
        reader = SqliteStore(tmp_path / "r.sqlite", read_only=True)
        assert [as_written(r) for r in reader.records(sid)] == [as_written(r) for r in expected if r.session_id == sid]
        reader.close()


def test_what_json_cannot_tell_apart_by_equality_is_kept_apart(tmp_path):
    """1 and 1.0 and true, the same keys in another order, keys to redact, big non-list values, ids past
    int32, a failed call without bodies: each record reads back as written."""
    base = [{"role": "user", "content": "x", "n": 1, "meta": {"a": 1, "b": 2}}]
    records = [
        call(0, base, [1, 2, 3], [4, 5]),
        call(1, [{"role": "user", "content": "x", "n": 1.0, "meta": {"b": 2, "a": 1}}], [1, 2, 3, 4, 5, 6], [7]),
        call(2, [{"role": "user", "content": "x", "n": True, "meta": {"a": 1, "b": 2}}], [1, 2, 3], [2**40, -3]),
        call(3, base + [{"role": "tool", "content": f"env: KEY={KEY} ünïcødé ✓"}], [9] * 600, [1]),
        call(4, base, [1, 2], [3], native={"instructions": "You are Codex. " * 200, "tools": []}),
        call(5, [], [], [], status="upstream_error", error=f"upstream said {KEY}"),
    ]
    records.append(records[5].model_copy(update={"id": "s0006", "seq": 6, "upstream_request": None}))
    store = SqliteStore(tmp_path / "r.sqlite")
    for r in records:
        store.add_record(r)
    store.flush()
    back = store.records("s")
    store.close()
    assert [as_written(r) for r in back] == [as_written(r) for r in records]
    assert (
        KEY not in str([r.model_dump() for r in back])
        and "[redacted]" in back[3].native_request["messages"][1]["content"]
    )
    assert back[1].native_request["messages"][0]["n"] == 1.0 and isinstance(
        back[1].native_request["messages"][0]["n"], float
    )
    assert back[2].native_request["messages"][0]["n"] is True
    assert list(back[1].native_request["messages"][0]["meta"]) == ["b", "a"]
    assert back[2].completion_token_ids == [2**40, -3]


def test_a_sessions_storage_grows_with_its_length(tmp_path):
    sizes = {}
    for turns in (40, 80):
        path = tmp_path / f"{turns}.sqlite"
        store = SqliteStore(path)
        records = growing(turns)
        for r in records:
            store.add_record(r)
        store.flush()
        assert [as_written(r) for r in store.records("s")] == [as_written(r) for r in records]
        store.close()
        last = len(as_written(records[-1]))
        sizes[turns] = store_size(path)
        assert sizes[turns] < 3 * last, f"{turns} calls took {sizes[turns]} bytes, the last record alone is {last}"
    assert sizes[80] / sizes[40] < 2.2


def test_records_arrive_durably_on_the_loop_and_from_prepared_bodies(tmp_path):
    """The proxy's path: bodies encoded (and their new items committed) while the upstream works, the
    record committed with them when the answer is in."""
    store = SqliteStore(tmp_path / "r.sqlite")
    records = growing(12)

    async def play() -> None:
        for r in records:
            bodies = store.prepare(r.session_id, r.id, r.native_request, r.upstream_request)
            assert bodies is not None
            await store.durable(r, bodies)

    asyncio.run(play())
    fresh = SqliteStore(tmp_path / "r.sqlite", read_only=True)  # what another process sees at once
    assert [as_written(r) for r in fresh.records("s")] == [as_written(r) for r in records]
    fresh.close()
    store.close()


def referred(encoded) -> set[str]:
    """The records an encoded record refers to."""
    doc = orjson.loads(unsqueeze(encoded.row[4]))
    bases = {e[2] for name in ("native_request", "upstream_request") for e in doc[name] or [] if e[1] == "l"}
    return (bases | {doc["prompt"][0] if doc["prompt"] else None}) - {None}


def test_a_reference_only_ever_names_a_committed_record_or_one_of_its_own_transaction():
    encoder = Encoder()
    first, second, third = growing(3)
    alone = encoder.encode(first)
    assert referred(encoder.encode(second)) == set()  # `first` is not in the store yet
    assert referred(encoder.encode(second, along=[alone])) == {first.id}  # committed together with it
    encoder.committed(alone)
    assert referred(encoder.encode(third)) == {first.id}
    encoder.committed(encoder.encode(second))
    assert referred(encoder.encode(third)) == {second.id}


def test_a_store_missing_what_a_record_refers_to_says_so(tmp_path):
    path = tmp_path / "r.sqlite"
    store = SqliteStore(path)
    for r in growing(3):
        store.add_record(r)
    store.flush()
    store.close()
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM parts")
    with pytest.raises(StoredRecordError, match="stored part"):
        SqliteStore(path, read_only=True).records("s")


def legacy_store(path, records: list[CompletionRecord]) -> None:
    """A store as version 3 wrote it: whole JSON records, no parts."""
    conn = connect(path)
    migrate(conn, MIGRATIONS[:3])
    for r in records:
        conn.execute(
            "INSERT INTO completions(id, session_id, seq, status, data) VALUES (?,?,?,?,?)",
            (r.id, r.session_id, r.seq, r.status, as_written(r)),
        )
    conn.execute("INSERT INTO completions(id, session_id, seq, status, data) VALUES ('bad', 'x', 0, 'ok', '{}')")
    conn.close()


def test_an_old_store_reads_as_it_is_read_only_and_migrates_when_opened_to_write(tmp_path):
    path = tmp_path / "old.sqlite"
    records = growing(6) + growing(4, session_id="t")
    legacy_store(path, records)
    reader = SqliteStore(path, read_only=True)
    assert [as_written(r) for r in reader.records("s")] == [as_written(r) for r in records[:6]]
    reader.close()
    with sqlite3.connect(path) as conn:
        assert version(conn) == 3  # shown, not migrated
        before = conn.execute("SELECT SUM(length(data)) FROM completions").fetchone()[0]
    writer = SqliteStore(path)  # migrates: every record stored by reference, the one unreadable row kept whole
    more = growing(8)[6:]
    for r in more:
        writer.add_record(r)
    writer.flush()
    with sqlite3.connect(path) as conn:
        assert version(conn) == len(MIGRATIONS)
        assert conn.execute("SELECT COUNT(*) FROM completions WHERE tokens IS NULL").fetchone()[0] == 1
        assert conn.execute("SELECT SUM(length(data)) FROM completions WHERE id != 'bad'").fetchone()[0] < before / 3
    assert [as_written(r) for r in writer.records("t")] == [as_written(r) for r in records[6:]]
    assert [as_written(r) for r in writer.records("s")] == [as_written(r) for r in records[:6] + more]
    with pytest.raises(ValueError):  # the unreadable row is still what it was: not a record
        writer.records("x")
    writer.close()


def test_a_read_only_store_writes_nothing(tmp_path):
    with pytest.raises(FileNotFoundError):
        SqliteStore(tmp_path / "none.sqlite", read_only=True)
    path = tmp_path / "r.sqlite"
    SqliteStore(path).close()
    reader = SqliteStore(path, read_only=True)
    assert reader.flush() is True and reader.records() == []
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        reader.close_session("s")
    reader.close()


def test_a_prompt_known_to_begin_with_an_earlier_one_gets_the_reference_a_comparison_finds():
    rng = random.Random(5)
    for _ in range(200):
        recent = []
        for i in range(rng.randint(1, 4)):
            p = [rng.randrange(4) for _ in range(rng.randint(0, 6))]
            recent.append(_Memory(f"r{i}", {}, p, [rng.randrange(4) for _ in range(rng.randint(0, 3))], []))
        known = rng.choice(recent).prompt
        prompt = known + [rng.randrange(4) for _ in range(rng.randint(0, 6))]
        assert _prefix(prompt, recent, known) == _prefix(prompt, recent)
