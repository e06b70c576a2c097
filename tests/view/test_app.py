"""`polar view`'s JSON API over a run folder and over a record store alone: the listing, rollups filled in
from the records, one session (calls, rollup, tree, traces), a call, a trace's tokens, the change feed."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from nemo_polar.bench.view import write_run
from nemo_polar.cli import main
from nemo_polar.contracts import HarnessSpec, TaskSpec
from nemo_polar.errors import ConfigError
from nemo_polar.paths import TINY_MODEL
from nemo_polar.server.rollout.store import RolloutStore
from nemo_polar.store import SqliteStore
from nemo_polar.view.app import ViewThread
from nemo_polar.view.sources import open_source


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("run")
    long_id, _ = write_run(folder, calls=90, per_session=10, trace_tokens=4000)
    return folder, long_id


def get(view, path: str):
    r = httpx.get(view.url + path, timeout=60)
    return r.status_code, r.json()


def rows(tasks: list[dict]) -> list[dict]:
    return [s for t in tasks for s in t["sessions"]]


def wait_for_rollups(view) -> list[dict]:
    for _ in range(100):
        _, body = get(view, "/api/tasks")
        if all(s["rollup"].get("prompt_tokens") is not None for s in rows(body["tasks"])):
            return body["tasks"]
        time.sleep(0.1)
    raise AssertionError("rollups never filled in")


def test_a_run_folder_lists_its_tasks_and_fills_in_rollups_from_the_records(run_dir):
    folder, long_id = run_dir
    with ViewThread(open_source(run_dir=str(folder))) as view:
        status, info = get(view, "/api/info")
        assert status == 200 and info["kind"] == "run" and info["source"] == str(folder)
        tasks = wait_for_rollups(view)
        sessions = rows(tasks)
        assert sum(s["rollup"]["calls"] for s in sessions) == 90
        assert {s["state"] for s in sessions} == {"completed"} and tasks[0]["task_id"] == "long"
        long = next(s for s in sessions if s["session_id"] == long_id)
        assert long["harness"] == "shell" and long["runtime"] == "local" and long["rollup"]["stages"]["run_s"] > 0
        assert long["rollup"]["trained_tokens"] == 40 * 20  # 40 turns of 20 sampled tokens (4000 // 200)


def test_one_session_its_calls_tree_traces_and_rollup_agree(run_dir):
    folder, _ = run_dir
    with ViewThread(open_source(run_dir=str(folder)), tokenizer=str(TINY_MODEL)) as view:
        _, body = get(view, "/api/tasks")
        forked = next(s for s in rows(body["tasks"]) if s["traces"] == 2)  # one with a sub-agent
        status, d = get(view, f"/api/sessions/{forked['session_id']}")
        assert status == 200 and d["session"]["final"] and d["session"]["transitions"][0]["to"] == "registered"
        assert d["tree"]["chains"] == len(d["traces"]) == d["stats"]["traces"] == 2
        assert len(d["tree"]["roots"]) == 2
        assert d["rollup"]["calls"] == len(d["calls"]) == 10
        assert d["rollup"]["prompt_tokens"] == sum(c["prompt_tokens"] for c in d["calls"])
        assert d["rollup"]["trained_tokens"] == sum(t["trained_tokens"] for t in d["traces"])
        assert d["rollup"]["model_s"] + d["rollup"]["tools_s"] <= d["rollup"]["stages"]["run_s"]

        first = d["calls"][0]
        status, call = get(view, f"/api/sessions/{forked['session_id']}/calls/{first['id']}")
        assert status == 200 and call["native_request"]["messages"] and call["message"]["content"] == "answer 0"
        assert "prompt_token_ids" not in call and call["prompt_tokens"] == first["prompt_tokens"]

        status, t = get(view, f"/api/sessions/{forked['session_id']}/traces/0")
        assert status == 200 and len(t["ids"]) == len(t["kinds"]) == len(t["logprobs"])
        trained = [i for i, k in enumerate(t["kinds"]) if k == "t"]
        assert len(trained) == d["traces"][0]["trained_tokens"]
        assert all(t["logprobs"][i] is not None for i in trained)
        assert all(t["logprobs"][i] is None for i, k in enumerate(t["kinds"]) if k in "pc")
        assert set(t["kinds"][: t["prompt_len"]]) == {"p"} and t["vocab"] and t["tokenizer"] == str(TINY_MODEL)
        assert t["vocab"][str(t["ids"][0])] == _text(t["ids"][0])

        status, err = get(view, f"/api/sessions/{forked['session_id']}/traces/9")
        assert status == 404 and err["error"]["type"] == "not_found"
        status, err = get(view, "/api/sessions/session-nope")
        assert status == 404 and "session-nope" in err["error"]["message"]


def _text(token_id: int) -> str:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(TINY_MODEL / "tokenizer.json")).decode([token_id], skip_special_tokens=False)


def test_a_record_store_alone_lists_capture_sessions_and_never_their_keys(run_dir):
    folder, _ = run_dir
    with ViewThread(open_source(store=str(folder / "records.sqlite"))) as view:
        tasks = wait_for_rollups(view)
        sessions = rows(tasks)
        store = SqliteStore(folder / "records.sqlite")
        opened = store.sessions()
        store.close()
        assert len(sessions) == len(opened) and not any(c.api_key for c in opened)  # the store keeps hashes only
        assert {s["state"] for s in sessions} == {"recorded"} and sum(s["rollup"]["calls"] for s in sessions) == 90
        some = sessions[1]
        status, d = get(view, f"/api/sessions/{some['session_id']}")
        assert status == 200 and d["rollup"]["calls"] == len(d["calls"]) and d["rollup"]["trained_tokens"] > 0
        everything = json.dumps([tasks, d])
        assert "sk-polar-" not in everything  # no key, whoever's


def test_a_rollout_store_finds_its_record_store_beside_it(run_dir):
    folder, _ = run_dir
    source = open_source(store=str(folder / "rollout.sqlite"))
    assert source.kind == "run" and source.records is not None


def test_the_viewer_never_writes_or_migrates_the_stores_it_shows(tmp_path):
    import sqlite3

    write_run(tmp_path, calls=6, per_session=6, trace_tokens=400)
    rollout, records = tmp_path / "rollout.sqlite", tmp_path / "records.sqlite"
    before = {p: p.read_bytes() for p in (rollout, records)}
    source = open_source(run_dir=str(tmp_path))
    assert source.store.last_change() > 0 and rows(source._listing())
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        source.store.submit(TaskSpec(task_id="no", instruction="x", harness=HarnessSpec(name="pi")))
    asyncio.run(source.close())
    assert {p: p.read_bytes() for p in (rollout, records)} == before
    conn = sqlite3.connect(rollout)
    conn.execute("PRAGMA user_version = 1")  # as an older nemo_polar left it
    conn.close()
    older = rollout.read_bytes()
    with pytest.raises(ConfigError, match="schema version 1.*a rollout server migrates it"):
        open_source(store=str(rollout))
    assert rollout.read_bytes() == older  # shown as it is or not at all: never migrated


def test_the_change_feed_says_when_the_run_changed(tmp_path):
    write_run(tmp_path, calls=12, per_session=6, trace_tokens=800)
    with ViewThread(open_source(run_dir=str(tmp_path))) as view:
        with httpx.stream("GET", view.url + "/api/events", timeout=30) as feed:
            lines = feed.iter_lines()
            assert next(lines) == ": connected"
            first = _event(lines)
            store = RolloutStore(tmp_path / "rollout.sqlite")  # as a running `polar up` would, a task more
            store.submit(TaskSpec(task_id="more", instruction="Again.", harness=HarnessSpec(name="pi")))
            store.close()
            second = _event(lines)
    assert first["version"] != second["version"]


def _event(lines) -> dict:
    for line in lines:
        if line.startswith("data: "):
            return json.loads(line[6:])
    raise AssertionError("the feed ended")


def test_the_command_wants_exactly_one_source(tmp_path, capsys):
    assert main(["view"]) == 2
    assert "one of RUN_DIR, --store FILE or --rollout URL" in capsys.readouterr().err
    assert main(["view", str(tmp_path)]) == 1
    assert "not a run folder" in capsys.readouterr().err
    assert main(["view", "--store", str(tmp_path / "none.sqlite")]) == 1
    assert main(["view", "--store", str(tmp_path / "x"), "--tokenizer", str(tmp_path)]) == 1  # no tokenizer.json


def test_a_learn_run_folder_shows_text_with_the_model_it_keeps(tmp_path):
    import shutil

    long_id, _ = write_run(tmp_path, calls=45, per_session=5, trace_tokens=2000)
    (tmp_path / "policy").mkdir()  # polar learn keeps the model it trains (served under another name)
    shutil.copy(TINY_MODEL / "tokenizer.json", tmp_path / "policy")
    with ViewThread(open_source(run_dir=str(tmp_path))) as view:
        _, t = get(view, f"/api/sessions/{long_id}/traces/0")
    assert t["vocab"] and t["tokenizer"] == str(tmp_path / "policy")
