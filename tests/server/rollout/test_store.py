"""The rollout store: atomic submit, the state machine, idempotent results, durability, recovery."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import pytest

from nemo_polar.contracts import NodeMetrics, NodeRegistration, SessionResult, TaskSpec
from nemo_polar.errors import Conflict, IllegalMove, NotFound
from nemo_polar.errors import RequestInvalid as StoreError
from nemo_polar.server.rollout import scheduler
from nemo_polar.server.rollout.store import RolloutStore, legal
from nemo_polar.states import SessionState

S = SessionState


def spec(**kw) -> TaskSpec:
    return TaskSpec.model_validate({"instruction": "fix the bug", "harness": {"name": "codex"}} | kw)


def result(s, status=S.COMPLETED, reward=1.0, **kw) -> SessionResult:
    return SessionResult(session_id=s.id, task_id=s.task_id, status=status, reward=reward, **kw)


@pytest.fixture
def store(tmp_path):
    st = RolloutStore(tmp_path / "rollout.sqlite")
    yield st
    st.close()


def test_submit_creates_all_sessions_and_refuses_duplicate_ids(store):
    task, sessions = store.submit(spec(task_id="t1", num_samples=4))
    assert task.id == "t1" and task.status == "running"
    assert [s.sample_index for s in sessions] == [0, 1, 2, 3]
    assert all(s.state is S.REGISTERED for s in store.sessions("t1"))
    with pytest.raises(Conflict, match="already submitted"):
        store.submit(spec(task_id="t1", num_samples=2))
    assert len(store.sessions("t1")) == 4  # the refused submit added nothing


def test_minted_task_ids_are_unique(store):
    a, _ = store.submit(spec())
    b, _ = store.submit(spec())
    assert a.id != b.id and a.spec.task_id == a.id


def test_state_machine_refuses_illegal_moves(store):
    _, (s,) = store.submit(spec(task_id="t"))
    store.move(s.id, S.INITIALIZING, "node", "n1")
    store.move(s.id, S.RUNNING, "node")  # a node may skip READY
    with pytest.raises(IllegalMove, match="from running to initializing"):
        store.move(s.id, S.INITIALIZING, "backwards")
    with pytest.raises(StoreError, match="final"):
        store.move(s.id, S.COMPLETED, "not through move")
    store.record_result(result(s))
    with pytest.raises(IllegalMove):
        store.move(s.id, S.POST_RUN, "after the end")
    assert store.session(s.id).node_id == "n1"
    assert [t["to"] for t in store.transitions(s.id)] == ["registered", "initializing", "running", "completed"]


def test_legal_is_forward_only_and_terminal_is_final():
    assert legal(S.REGISTERED, S.EVALUATING) and legal(S.RUNNING, S.TIMEOUT)
    assert not legal(S.RUNNING, S.READY) and not legal(S.RUNNING, S.RUNNING)
    for t in (S.COMPLETED, S.ERROR, S.TIMEOUT, S.CANCELLED):
        assert not any(legal(t, d) for d in S)


def test_duplicate_results_are_counted_once(store):
    _, (a, b) = store.submit(spec(task_id="t", num_samples=2))
    first = store.record_result(result(a, reward=1.0))
    again = store.record_result(result(a, status=S.ERROR, reward=0.0))
    assert not first.duplicate and again.duplicate
    assert store.session(a.id).result["reward"] == 1.0
    assert store.counts("t") == {"completed": 1, "registered": 1}
    assert store.task("t").status == "running"
    assert store.record_result(result(b)).task_finished
    assert not store.record_result(result(b)).task_finished  # finished exactly once
    assert store.task("t").status == "completed" and store.task("t").finished_at


def test_result_validation(store):
    _, (s,) = store.submit(spec(task_id="t"))
    with pytest.raises(StoreError, match="final status"):
        store.record_result(result(s, status=S.RUNNING))
    with pytest.raises(StoreError, match="belongs to task"):
        store.record_result(SessionResult(session_id=s.id, task_id="other", status=S.COMPLETED))
    with pytest.raises(NotFound):
        store.record_result(SessionResult(session_id="nope", task_id="t", status=S.COMPLETED))


def test_cancel_moves_only_live_sessions(store):
    _, (a, b, c) = store.submit(spec(task_id="t", num_samples=3))
    store.record_result(result(a))
    store.move(b.id, S.RUNNING, "node", "n1")
    moved = store.cancel("t")
    assert {s.id for s in moved} == {b.id, c.id}
    assert store.counts("t") == {"completed": 1, "cancelled": 2}
    assert store.task("t").status == "cancelled"
    assert store.session(b.id).result["masked"] is True and store.session(b.id).result["failure_kind"] == "cancelled"
    assert store.record_result(result(b)).duplicate  # a late result for a cancelled session
    with pytest.raises(NotFound):
        store.cancel("nope")


def test_dispatch_and_requeue_keep_the_session_and_count_attempts(store):
    _, (s,) = store.submit(spec(task_id="t"))
    assert store.next_registered().id == s.id
    store.mark_dispatched(s.id, "n1")
    assert store.next_registered() is None
    with pytest.raises(IllegalMove):
        store.mark_dispatched(s.id, "n2")
    store.requeue(s.id, "dispatch failed")
    again = store.mark_dispatched(s.id, "n2")
    assert (again.attempt, again.node_id, again.state) == (2, "n2", S.REGISTERED)
    assert len(store.sessions("t")) == 1


def test_next_registered_prefers_priority_then_age(store):
    store.submit(spec(task_id="low", priority=0))
    store.submit(spec(task_id="high", priority=50))
    assert store.next_registered().task_id == "high"


def test_recover_ends_every_in_flight_session_with_its_cause(tmp_path):
    path = tmp_path / "r.sqlite"
    st = RolloutStore(path)
    _, sessions = st.submit(spec(task_id="t", num_samples=5))
    waiting, dispatched, init, running, done = sessions
    st.mark_dispatched(dispatched.id, "n1")
    st.move(init.id, S.INITIALIZING, "node", "n1")
    st.move(running.id, S.RUNNING, "node", "n2")
    st.record_result(result(done))
    st.close()

    st = RolloutStore(path)
    ended = st.recover()
    assert {s.id for s in ended} == {init.id, running.id}
    for s in ended:
        row = st.session(s.id)
        assert row.state is S.ERROR and row.result["error"] == "rollout server restarted" and row.result["masked"]
        assert row.result["failure_kind"] == "session_lost"
        assert st.transitions(s.id)[-1]["cause"] == "rollout server restarted"
    assert st.session(waiting.id).state is S.REGISTERED
    assert st.session(dispatched.id).node_id is None  # dispatched again after the restart
    assert st.session(done.id).result["reward"] == 1.0
    st.close()


def test_recover_keeps_sessions_of_live_nodes(store):
    _, (a, b) = store.submit(spec(task_id="t", num_samples=2))
    store.move(a.id, S.RUNNING, "node", "alive")
    store.move(b.id, S.RUNNING, "node", "dead")
    ended = store.recover(node_alive=lambda node: node == "alive")
    assert [s.id for s in ended] == [b.id]
    assert store.session(a.id).state is S.RUNNING


def test_acknowledged_results_survive_a_kill_9(tmp_path):
    """A child writes results and says so, then is killed mid-run; every acknowledged one is on disk."""
    path = tmp_path / "crash.sqlite"
    st = RolloutStore(path)
    _, sessions = st.submit(spec(task_id="t", num_samples=50))
    st.close()
    child = textwrap.dedent(f"""
        import sys, time
        from nemo_polar.contracts import SessionResult
        from nemo_polar.server.rollout.store import RolloutStore
        st = RolloutStore({str(path)!r})
        for s in st.sessions("t"):
            st.record_result(SessionResult(session_id=s.id, task_id="t", status="completed", reward=0.5))
            print(s.id, flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
    acked = [proc.stdout.readline().strip() for _ in range(30)]
    proc.kill()  # SIGKILL: no close, no checkpoint
    proc.wait()
    st = RolloutStore(path)
    for sid in acked:
        assert st.session(sid).state is S.COMPLETED
    assert st.counts("t")["completed"] >= 30
    st.close()


def test_nodes_register_heartbeat_drain(store):
    reg = NodeRegistration(node_id="n1", url="http://n1")
    store.register_node(reg)
    store.heartbeat("n1", NodeMetrics(run_inflight=3))
    assert store.node("n1").metrics.run_inflight == 3
    assert store.drain("n1").draining
    assert not store.register_node(reg).draining  # a re-registered node takes work again
    with pytest.raises(NotFound, match="register again"):
        store.heartbeat("nope", NodeMetrics())


# --- the scheduler (pure) ------------------------------------------------------------------------
def node(node_id, hb=0.0, draining=False, heartbeat_s=5.0, **metrics):
    from nemo_polar.server.rollout.store import NodeRow

    reg = NodeRegistration(
        node_id=node_id,
        url=f"http://{node_id}",
        heartbeat_s=heartbeat_s,
        capacity={"init": 2, "run": 4, "postrun": 2, "ready": 2},
    )
    return NodeRow(reg, NodeMetrics(**metrics), hb, draining)


def test_health_is_heartbeat_within_10_intervals_and_not_draining():
    assert scheduler.healthy(node("a", hb=100), now=149.9)  # heartbeat_s 5
    assert not scheduler.healthy(node("a", hb=100), now=150.1)
    assert not scheduler.healthy(node("a", hb=100, draining=True), now=101)
    assert scheduler.alive(node("a", hb=100, draining=True), now=101)
    # a node whose proxy cannot record calls is alive (its sessions are not lost) but gets no new ones
    deaf = node("a", hb=100, recording=False)
    assert scheduler.alive(deaf, now=101) and not scheduler.healthy(deaf, now=101)
    assert scheduler.pick([deaf], {}, 101) is None


def test_pick_prefers_run_then_postrun_then_init_pressure():
    now = 1.0
    a = node("a", run_inflight=2)
    b = node("b", run_inflight=1, postrun_inflight=2)
    c = node("c", run_inflight=1, init_inflight=2)
    assert scheduler.pick([a, b, c], {}, now).id == "c"
    assert scheduler.pick([a, b], {}, now).id == "b"
    assert scheduler.pick([node("x"), node("y")], {"x": 1}, now).id == "y"  # reservations count as init load


def test_pick_skips_full_stale_and_draining_nodes():
    full = node("full", init_inflight=2, ready=2, run_inflight=4, postrun_inflight=2)
    assert scheduler.free(full) == 0
    assert scheduler.pick([full, node("old", hb=-100), node("d", draining=True)], {}, 1.0) is None
    assert scheduler.pick([node("a", run_inflight=4, ready=1)], {"a": 4}, 1.0) is not None
    assert scheduler.pick([node("a", run_inflight=4, ready=1)], {"a": 5}, 1.0) is None


def test_lost_plan_requeues_unstarted_and_fails_started(store):
    _, sessions = store.submit(spec(task_id="t", num_samples=4))
    store.move(sessions[1].id, S.READY, "n", "n1")
    store.move(sessions[2].id, S.RUNNING, "n", "n1")
    store.record_result(result(sessions[3]))
    requeue, fail = scheduler.lost_plan(store.sessions("t"))
    assert [s.id for s in requeue] == [sessions[0].id, sessions[1].id]
    assert [s.id for s in fail] == [sessions[2].id]


def test_overdue_counts_from_the_start_of_init(store):
    _, (a, b, c) = store.submit(spec(task_id="t", num_samples=3, session_timeout_s=10))
    store.move(a.id, S.INITIALIZING, "node", "n1")
    store.move(b.id, S.RUNNING, "node", "n1")
    store.record_result(result(b))
    start = store.session(a.id).updated_at
    assert store.overdue(start + 5, grace_s=1) == []
    assert [s.id for s in store.overdue(start + 12, grace_s=1)] == [a.id]  # c never started: not overdue
    store.requeue(a.id, "node lost")
    assert store.overdue(start + 100, grace_s=1) == []  # re-queued: its clock starts again at INIT


def test_two_connections_racing_on_one_result_accept_it_once(tmp_path):
    path = tmp_path / "race.sqlite"
    first = RolloutStore(path)
    _, sessions = first.submit(spec(task_id="t", num_samples=20))
    second = RolloutStore(path)
    outcomes = []

    def send(st):
        for s in sessions:
            outcomes.append(st.record_result(result(s)).duplicate)

    threads = [threading.Thread(target=send, args=(st,)) for st in (first, second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == [False] * 20 + [True] * 20
    assert first.counts("t") == {"completed": 20} and first.task("t").status == "completed"
    first.close()
    second.close()


def test_a_node_that_lost_its_session_cannot_move_it(store):
    _, (s,) = store.submit(spec(task_id="t"))
    store.mark_dispatched(s.id, "n1")
    store.requeue(s.id, "node lost")
    store.mark_dispatched(s.id, "n2")
    with pytest.raises(IllegalMove, match="assigned to node n2"):
        store.move(s.id, S.INITIALIZING, "late", "n1")
    assert store.move(s.id, S.INITIALIZING, "node", "n2").node_id == "n2"


# --- schema versions ----------------------------------------------------------------------------
OLD_SCHEMA = """
CREATE TABLE tasks (id TEXT PRIMARY KEY, spec BLOB NOT NULL, status TEXT NOT NULL, priority INTEGER NOT NULL,
  session_timeout_s REAL NOT NULL, created_at REAL NOT NULL, finished_at REAL);
CREATE TABLE sessions (id TEXT PRIMARY KEY, task_id TEXT NOT NULL, sample_index INTEGER NOT NULL, state TEXT NOT NULL,
  node_id TEXT, attempt INTEGER NOT NULL DEFAULT 0, started_at REAL, updated_at REAL NOT NULL, result BLOB);
CREATE TABLE transitions (session_id TEXT NOT NULL, from_state TEXT, to_state TEXT NOT NULL, at REAL NOT NULL,
  cause TEXT NOT NULL);
CREATE TABLE nodes (id TEXT PRIMARY KEY, registration BLOB NOT NULL, metrics BLOB NOT NULL,
  last_heartbeat REAL NOT NULL, draining INTEGER NOT NULL DEFAULT 0);
"""


def test_a_store_from_before_versions_is_brought_forward(tmp_path):
    import sqlite3

    import orjson

    from nemo_polar.migrations import version
    from nemo_polar.server.rollout.schema import MIGRATIONS

    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(OLD_SCHEMA)  # no group_id, no user_version: as written before either existed
    old = {"task_id": "old", "instruction": "x", "harness": {"name": "pi", "dialect": None, "command": None}}
    conn.execute("INSERT INTO tasks VALUES ('old', ?, 'running', 0, 60, 1.0, NULL)", (orjson.dumps(old),))
    conn.execute("INSERT INTO sessions VALUES ('sk-polar-abc', 'old', 0, 'registered', NULL, 0, NULL, 1.0, NULL)")
    conn.commit()
    conn.close()
    store = RolloutStore(path)
    try:
        assert store.schema_version == len(MIGRATIONS) == version(store._conn)
        assert store.task("old").spec.harness.name == "pi" and store.group("g") == []
        assert [s.id for s in store.sessions("old")] == ["sk-polar-abc"]
        store.submit(spec(task_id="new", group_id="g"))
        assert [t.id for t in store.group("g")] == ["new"]
    finally:
        store.close()
    RolloutStore(path).close()  # opening again changes nothing


def test_a_store_written_now_opens_after_a_spec_field_is_renamed(tmp_path):
    """A later version renames TaskSpec.agent_timeout_s to agent_budget_s: without a migration its stored
    specs would no longer validate; with one that rewrites them, the store opens as if nothing happened."""
    from pydantic import ConfigDict, ValidationError, create_model

    from nemo_polar.migrations import Migration, rename_key, rewrite_json
    from nemo_polar.server.rollout.schema import MIGRATIONS

    path = tmp_path / "rollout.sqlite"
    now = RolloutStore(path)
    now.submit(spec(task_id="t", agent_timeout_s=42))
    now.close()

    fields = {
        ("agent_budget_s" if name == "agent_timeout_s" else name): (f.annotation, f)
        for name, f in TaskSpec.model_fields.items()
    }
    renamed = create_model("TaskSpec", __config__=ConfigDict(extra="forbid"), **fields)
    unmigrated = RolloutStore(path, spec_model=renamed)
    with pytest.raises(ValidationError, match="agent_timeout_s"):
        unmigrated.task("t")  # the bug a schema version fixes
    unmigrated.close()

    rename = Migration(
        len(MIGRATIONS) + 1,
        "TaskSpec.agent_timeout_s is agent_budget_s",
        rewrite_json("tasks", "spec", rename_key("agent_timeout_s", "agent_budget_s"), key="id"),
    )
    later = RolloutStore(path, migrations=(*MIGRATIONS, rename), spec_model=renamed)
    try:
        assert later.schema_version == len(MIGRATIONS) + 1
        assert later.task("t").spec.agent_budget_s == 42 and later.tasks()[0].id == "t"
        assert [s.state for s in later.sessions("t")] == [S.REGISTERED]
    finally:
        later.close()


def test_a_store_from_a_newer_version_is_refused(tmp_path):
    import sqlite3

    from nemo_polar.migrations import StoreTooNew

    path = tmp_path / "future.sqlite"
    RolloutStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(StoreTooNew, match="schema version 99"):
        RolloutStore(path)
