"""What hostile but well-formed-enough input found: request shapes that crashed a call, a body that
stopped all recording, a client that left before its answer, and keys in stored bodies. Each is a 4xx
in the caller's dialect, a record saying what happened, or a redaction, and the proxy goes on."""

from __future__ import annotations

import asyncio
import sqlite3

import httpx
import orjson
import pytest

from nemo_polar.control import json_depth
from nemo_polar.proxy.pipeline import gone
from nemo_polar.records import CompletionRecord, UpstreamInfo
from nemo_polar.store import SqliteStore
from tests.conftest import make_proxy, records

from .dialect_cases import CASES

BY_DIALECT = {c.dialect: c for c in CASES}


def nested(depth: int) -> str:
    """JSON text of a list nested `depth` deep (too deep for orjson to write)."""
    return "[" * depth + "1" + "]" * depth


def schema_nested(depth: int) -> str:
    return '{"type": "array", "items": ' * depth + '{"type": "string"}' + "}" * depth


def raw(body: dict, deep: str | None = None) -> bytes:
    """The body as JSON, with `deep` (JSON text) where the body says "DEEP"."""
    out = orjson.dumps(body)
    return out.replace(b'"DEEP"', deep.encode()) if deep else out


def chat(text="hi", **extra):
    return {"model": "m", "messages": [{"role": "user", "content": text}], "max_tokens": 4} | extra


def tool(parameters) -> dict:
    return {"type": "function", "function": {"name": "f", "parameters": parameters}}


SHAPES = [  # (dialect, body): each once crashed its call with a plain-text 500
    ("openai_chat", raw(chat(tools=[tool({"type": "object"})], tool_choice={"function": "x"}))),
    ("openai_responses", raw({"model": "m", "input": [{"type": [], "content": "hi"}]})),
    ("openai_responses", raw({"model": "m", "input": "hi", "tools": [{"type": {}, "name": "f"}]})),
    ("anthropic", raw({"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": [{"type": []}]}]})),
    ("openai_chat", raw(chat(tools=[tool("DEEP")]), nested(300))),
    (
        "gemini",
        raw(
            {
                "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
                "tools": [{"functionDeclarations": [{"name": "f", "parameters": "DEEP"}]}],
            },
            schema_nested(990),
        ),
    ),
    ("openai_chat", raw(chat(unknown="DEEP"), nested(300))),  # accepted once, and it killed the record writer
]


@pytest.mark.parametrize("dialect,body", SHAPES, ids=[f"{d}-{i}" for i, (d, _) in enumerate(SHAPES)])
def test_a_shape_the_dialect_cannot_read_is_a_4xx_in_its_dialect_and_the_proxy_goes_on(dialect, body, proxy, session):
    case = BY_DIALECT[dialect]
    with httpx.Client(base_url=proxy.url) as client:  # one kept-alive connection for both calls
        bad = client.post(case.path(False), content=body, headers=case.headers(session["api_key"]))
        assert bad.status_code == 400, bad.text
        assert case.error_message(bad.json()), bad.text  # the dialect's own error shape
        good = client.post(case.path(False), json=case.body("hi", False), headers=case.headers(session["api_key"]))
        assert good.status_code == 200, good.text
    (recorded,) = records(proxy, session["session_id"])  # the good call, nothing of the bad one
    assert recorded.status == "ok"
    health = httpx.get(proxy.url + "/health")
    assert health.status_code == 200 and health.json()["recording"]["ok"] is True


def test_pause_with_a_timeout_that_is_not_a_number_is_a_400(proxy):
    r = httpx.post(proxy.url + "/admin/inference/pause?timeout_seconds=abc")
    assert r.status_code == 400 and "timeout_seconds" in r.json()["error"]["message"]
    assert httpx.get(proxy.url + "/admin/inference/status").json()["paused"] is False


BASE = dict(
    session_id="s",
    started_at=0.0,
    finished_at=1.0,
    dialect="openai_chat",
    stream=False,
    native_request={},
    upstream=UpstreamInfo(engine="vllm", url="http://u", model="m"),
)


def test_a_record_that_cannot_be_serialised_is_stored_as_an_error_and_the_writer_goes_on(tmp_path):
    store = SqliteStore(tmp_path / "r.sqlite")
    base = BASE
    too_deep: object = 1
    for _ in range(300):
        too_deep = [too_deep]
    deep = CompletionRecord.model_construct(
        **CompletionRecord(id="a", seq=0, **base).__dict__ | {"native_request": {"x": too_deep}}
    )
    store.add_record(deep)
    store.add_record(CompletionRecord(id="b", seq=1, **base))
    store.flush()
    first, second = store.records("s")
    assert first.status == "error" and "could not be stored" in first.error and first.native_request == {}
    assert second.status == "ok" and store.healthy
    store.close()


def test_a_failing_commit_is_reported_and_tried_again(tmp_path, monkeypatch):
    import time

    from nemo_polar import store as module

    def impatient(path):  # the writer's connection gives up on a lock at once instead of after 10 s
        conn = connect(path)
        conn.execute("PRAGMA busy_timeout=50")
        return conn

    connect = module.connect
    monkeypatch.setattr(module, "connect", impatient)
    store = SqliteStore(tmp_path / "r.sqlite")
    blocker = sqlite3.connect(tmp_path / "r.sqlite", isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")  # nobody else may write: the writer's commit fails
    store.add_record(CompletionRecord(id="a", seq=0, **BASE))
    assert store.flush(0.5) is False
    assert not store.healthy and "cannot be written" in store.problem
    blocker.execute("ROLLBACK")
    blocker.close()
    assert store.flush(30) is True  # tried again: nothing lost
    time.sleep(0.1)
    (kept,) = store.records("s")
    assert kept.id == "a" and store.healthy
    store.close()


def test_a_durable_record_the_loop_cannot_commit_goes_to_the_writer_and_is_not_lost(tmp_path):
    store = SqliteStore(tmp_path / "r.sqlite")
    blocker = sqlite3.connect(tmp_path / "r.sqlite", isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")

    async def main() -> None:
        committed = store.durable(CompletionRecord(id="a", seq=0, **BASE))
        t0 = asyncio.get_running_loop().time()
        await asyncio.sleep(0.3)
        assert not committed.done()  # the lock is held: not committed, and the caller still waits
        assert asyncio.get_running_loop().time() - t0 < 1.0  # the loop was not held for the writer's 10 s
        blocker.execute("ROLLBACK")
        await asyncio.wait_for(committed, 30)

    asyncio.run(main())
    blocker.close()
    assert [r.id for r in store.records("s")] == ["a"]
    store.close()


def test_a_non_streaming_call_whose_client_left_is_recorded_as_such(fake_upstream, tmp_path):
    with make_proxy(fake_upstream.url, tmp_path) as proxy:
        opened = proxy.proxy.sessions.open()
        with pytest.raises(httpx.ReadTimeout):  # the upstream takes 1 s; the harness gives up after 0.3 s
            httpx.post(
                proxy.url + "/v1/chat/completions",
                json=chat("[fault:slow]"),
                headers={"authorization": f"Bearer {opened.api_key}"},
                timeout=0.3,
            )
        import time

        time.sleep(1.5)
        (recorded,) = records(proxy, opened.id)
        assert recorded.status == "client_disconnected" and not recorded.trainable


def test_keys_are_stored_as_hashes_and_redacted_from_every_stored_body(proxy):
    mine, theirs = proxy.proxy.sessions.open(), proxy.proxy.sessions.open()
    escaped = mine.api_key[:12] + "\\u00" + format(ord(mine.api_key[12]), "02x") + mine.api_key[13:]
    text = f"env: KEY={theirs.api_key} mine={mine.api_key} [fault:echo]"
    raw = orjson.dumps(chat(text)).replace(b"[fault:echo]", f"also {escaped} [fault:echo]".encode())
    r = httpx.post(
        proxy.url + "/v1/chat/completions",
        content=raw,
        headers={"authorization": f"Bearer {mine.api_key}", "content-type": "application/json"},
    )
    assert r.status_code == 200 and theirs.api_key in r.text  # the model echoed both keys back to the harness
    (recorded,) = records(proxy, mine.id)
    stored = recorded.model_dump_json()
    assert (
        "[redacted]" in recorded.message["content"]
        and "[redacted]" in recorded.native_request["messages"][0]["content"]
    )
    for key in (mine.api_key, theirs.api_key):
        assert key not in stored
    on_disk = (proxy.proxy.store.path).read_bytes() + proxy.proxy.store.path.with_suffix(".sqlite-wal").read_bytes()
    assert mine.api_key.encode() not in on_disk and theirs.api_key.encode() not in on_disk


def test_a_closed_sessions_key_is_refused_also_after_a_restart(fake_upstream, tmp_path):
    with make_proxy(fake_upstream.url, tmp_path) as proxy:
        opened = proxy.proxy.sessions.open()
        headers = {"authorization": f"Bearer {opened.api_key}"}
        assert httpx.post(proxy.url + "/v1/chat/completions", json=chat(), headers=headers).status_code == 200
        closed = httpx.post(f"{proxy.url}/admin/sessions/{opened.id}/close")
        assert closed.status_code == 200
        late = httpx.post(proxy.url + "/v1/chat/completions", json=chat(), headers=headers)
        assert late.status_code == 401 and "API key" in late.json()["error"]["message"]
        other = proxy.proxy.sessions.open()  # open across the restart
    with make_proxy(fake_upstream.url, tmp_path) as proxy:
        assert httpx.post(proxy.url + "/v1/chat/completions", json=chat(), headers=headers).status_code == 401
        again = {"authorization": f"Bearer {other.api_key}"}
        assert httpx.post(proxy.url + "/v1/chat/completions", json=chat(), headers=again).status_code == 200
        kept = httpx.get(f"{proxy.url}/admin/sessions/{opened.id}/completions").json()["data"]
        assert [r["status"] for r in kept] == ["ok"]  # its records stay readable


def test_an_old_store_with_plaintext_keys_is_migrated_to_hashes(fake_upstream, tmp_path):
    path = tmp_path / "records.sqlite"
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE sessions (id TEXT PRIMARY KEY, api_key TEXT UNIQUE NOT NULL, created_at REAL NOT NULL,"
        " data BLOB NOT NULL)"
    )
    key = "sk-polar-" + "k" * 32
    conn.execute(
        "INSERT INTO sessions VALUES (?,?,?,?)",
        ("old", key, 1.0, orjson.dumps({"id": "old", "api_key": key, "created_at": 1.0})),
    )
    conn.commit()
    conn.close()
    with make_proxy(fake_upstream.url, tmp_path) as proxy:
        r = httpx.post(proxy.url + "/v1/chat/completions", json=chat(), headers={"authorization": f"Bearer {key}"})
        assert r.status_code == 200
        (recorded,) = records(proxy, "old")
        assert recorded.status == "ok"
    assert key.encode() not in path.read_bytes()


def test_a_short_body_at_the_depth_limit_is_read_and_one_level_deeper_is_a_400(proxy, session):
    """Short bodies are bounded by their count of brackets rather than walked: the limit stays exact."""
    limit = 100  # limits.max_depth's default
    at = next(
        raw(chat(unknown="DEEP"), nested(n))
        for n in range(200)
        if json_depth(orjson.loads(raw(chat(unknown="DEEP"), nested(n))), 999) == limit
    )
    deeper = at.replace(b"[1]", b"[[1]]")
    assert len(deeper) < 4096 and json_depth(orjson.loads(deeper), 999) == limit + 1
    headers = {"authorization": f"Bearer {session['api_key']}"}
    assert httpx.post(proxy.url + "/v1/chat/completions", content=at, headers=headers).status_code == 200
    refused = httpx.post(proxy.url + "/v1/chat/completions", content=deeper, headers=headers)
    assert refused.status_code == 400 and "deeper" in refused.json()["error"]["message"]


def test_whether_the_client_left_is_asked_of_any_asgi_server_without_waiting():
    async def left() -> dict:
        return {"type": "http.disconnect"}

    async def waiting() -> dict:
        await asyncio.Event().wait()
        return {"type": "http.request"}

    async def main() -> tuple[bool, bool]:
        return gone(left), gone(waiting)

    assert asyncio.run(main()) == (True, False)
