"""The rollout server's HTTP API, through a real uvicorn server on a thread."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from nemo_polar.server.client import RolloutAPI
from nemo_polar.server.rollout import RolloutConfig, RolloutThread
from nemo_polar.serving import ServerThread, free_port

TOKEN = "s3cret"
H = {"x-polar-control-token": TOKEN}
TASK = {"instruction": "fix the bug", "harness": {"name": "codex"}}
NODE = {"node_id": "n1", "url": "http://n1:9000", "heartbeat_s": 5.0}


def make(tmp_path, **kw) -> RolloutThread:
    cfg = RolloutConfig.model_validate(
        {"port": 0, "control_token": TOKEN, "reap_interval_s": 0.05, "store": {"path": str(tmp_path / "r.sqlite")}}
        | kw
    )
    return RolloutThread(cfg)


@pytest.fixture
def srv(tmp_path):
    with make(tmp_path) as t:
        yield t


@pytest.fixture
def client(srv):
    with httpx.Client(base_url=srv.url, headers=H, timeout=10) as c:
        yield c


def submit(client, **kw) -> dict:
    r = client.post("/tasks", json=TASK | kw)
    assert r.status_code == 201, r.text
    return r.json()


def finish(client, task_id, sid, status="completed", reward=1.0) -> httpx.Response:
    body = {"session_id": sid, "task_id": task_id, "status": status, "reward": reward, "node_id": "n1"}
    return client.post("/callbacks/session_result", json=body)


def test_health(client):
    assert client.get("/health").json() == {"status": "ok", "nodes": 0, "healthy_nodes": 0}


def test_submit_get_list_and_results(client):
    out = submit(client, task_id="t1", num_samples=3)
    assert out["task_id"] == "t1" and len(out["session_ids"]) == 3
    task = client.get("/tasks/t1").json()
    assert task["status"] == "running" and task["counts"] == {"registered": 3}
    assert [s["state"] for s in task["sessions"]] == ["registered"] * 3
    for sid in out["session_ids"]:
        assert finish(client, "t1", sid).json() == {"status": "accepted", "duplicate": False}
    task = client.get("/tasks/t1").json()
    assert task["status"] == "completed" and task["counts"] == {"completed": 3}
    assert task["sessions"][0]["result"]["reward"] == 1.0
    listed = client.get("/tasks").json()["tasks"]
    assert [t["task_id"] for t in listed] == ["t1"] and listed[0]["counts"] == {"completed": 3}
    assert client.get("/tasks", params={"status": "running"}).json() == {"tasks": []}


def test_invalid_spec_names_the_fields(client):
    r = client.post("/tasks", json={"instruction": "", "harness": {}, "num_samples": 0, "bogus": 1})
    assert r.status_code == 400
    msg = r.json()["error"]["message"]
    for field in ("instruction", "harness.name", "num_samples", "bogus"):
        assert field in msg
    r = client.post("/tasks", content=b"{not json")
    assert r.status_code == 400 and "not JSON" in r.json()["error"]["message"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"upstream_url": "::::"}, "upstream_url"),
        ({"upstream_url": "ftp://host/x"}, "upstream_url"),
        ({"upstream_url": "http://host:99999"}, "upstream_url"),
        ({"callback_url": "not a url"}, "callback_url"),
        ({"num_samples": "2"}, "num_samples"),
        ({"num_samples": True}, "num_samples"),
        ({"priority": 1.5}, "priority"),
        ({"agent_timeout_s": 1e308}, "agent_timeout_s"),
        ({"session_timeout_s": "60"}, "session_timeout_s"),
        ({"max_output_tokens": False}, "max_output_tokens"),
        ({"num_samples": 2, "early_stop_k": 3}, "early_stop_k"),
        ({"harness": {"name": "codex", "max_steps": "5"}}, "harness.max_steps"),
        ({"runtime": {"prepare": [{"command": "x", "retries": True}]}}, "runtime.prepare.0.retries"),
        ({"runtime": {"repo": "/no/such/folder"}}, "runtime.repo"),
    ],
)
def test_the_door_refuses_a_bad_spec_naming_the_field(client, change, field):
    r = client.post("/tasks", json=TASK | change)
    assert r.status_code == 400, r.text
    assert field in r.json()["error"]["message"]


def test_the_door_takes_what_the_bounds_allow(client, tmp_path):
    ok = {"num_samples": 4, "early_stop_k": 4, "agent_timeout_s": 60, "upstream_url": "https://vllm.node7:8000/v1"}
    assert client.post("/tasks", json=TASK | ok | {"runtime": {"repo": str(tmp_path)}}).status_code == 201
    grouped = {"num_samples": 1, "early_stop_k": 3, "group_id": "g1"}  # a Gym group: k counts the group
    assert client.post("/tasks", json=TASK | grouped).status_code == 201


def test_duplicate_submit_is_409(client):
    submit(client, task_id="dup")
    r = client.post("/tasks", json=TASK | {"task_id": "dup"})
    assert r.status_code == 409 and "already submitted" in r.json()["error"]["message"]


def test_unknown_task_and_node_are_404(client):
    assert client.get("/tasks/nope").status_code == 404
    assert client.delete("/tasks/nope").status_code == 404
    assert client.post("/nodes/nope/drain").status_code == 404
    r = client.post("/nodes/nope/heartbeat", json={"metrics": {}})
    assert r.status_code == 404 and "register again" in r.json()["error"]["message"]
    assert finish(client, "t", "no-such-session").status_code == 404


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/tasks", TASK),
        ("DELETE", "/tasks/x", None),
        ("POST", "/nodes", NODE),
        ("POST", "/nodes/n1/heartbeat", {}),
        ("POST", "/nodes/n1/drain", None),
        ("POST", "/callbacks/session_result", {}),
        ("POST", "/callbacks/session_state", {}),
        ("GET", "/tasks", None),
        ("GET", "/tasks/x", None),
        ("GET", "/nodes", None),
        ("GET", "/events", None),
    ],
)
@pytest.mark.parametrize("token", [None, "wrong"])
def test_control_token_required(srv, method, path, body, token):
    headers = {"x-polar-control-token": token} if token else {}
    r = httpx.request(method, srv.url + path, json=body, headers=headers)
    assert r.status_code == 401 and "x-polar-control-token" in r.json()["error"]["message"]


def test_health_and_metrics_need_no_token(srv):
    for path in ("/health", "/metrics"):
        assert httpx.get(srv.url + path).status_code == 200


def test_cancel(client):
    out = submit(client, task_id="c", num_samples=2)
    finish(client, "c", out["session_ids"][0])
    r = client.delete("/tasks/c")
    assert r.status_code == 200 and r.json()["cancelled_sessions"] == [out["session_ids"][1]]
    task = client.get("/tasks/c").json()
    assert task["status"] == "cancelled" and task["counts"] == {"completed": 1, "cancelled": 1}
    assert finish(client, "c", out["session_ids"][1]).json()["duplicate"] is True


def test_duplicate_result_is_200_and_first_wins(client):
    sid = submit(client, task_id="d", num_samples=2)["session_ids"][0]
    assert finish(client, "d", sid, reward=1.0).json()["duplicate"] is False
    r = finish(client, "d", sid, status="error", reward=0.0)
    assert r.status_code == 200 and r.json()["duplicate"] is True
    session = client.get("/tasks/d").json()["sessions"][0]
    assert session["state"] == "completed" and session["result"]["reward"] == 1.0


def test_bad_results_and_state_reports(client):
    sid = submit(client, task_id="b")["session_ids"][0]
    r = client.post("/callbacks/session_result", json={"session_id": sid})
    assert r.status_code == 400 and "task_id" in r.json()["error"]["message"]
    assert finish(client, "b", sid, status="running").status_code == 400
    assert finish(client, "other", sid).status_code == 400
    r = client.post("/callbacks/session_state", json={"session_id": sid, "state": "running", "node_id": "n1"})
    assert r.status_code == 200 and r.json()["state"] == "running"
    # reports cross on the network: a backward one is stale, answered, and changes nothing
    r = client.post("/callbacks/session_state", json={"session_id": sid, "state": "ready"})
    assert r.status_code == 200 and r.json()["stale"] and r.json()["state"] == "running"
    # but another node may not move a session it does not hold
    r = client.post("/callbacks/session_state", json={"session_id": sid, "state": "post_run", "node_id": "n2"})
    assert r.status_code == 409


def test_nodes_register_heartbeat_drain_list(client):
    r = client.post("/nodes", json=NODE)
    assert r.status_code == 201 and r.json()["node_id"] == "n1"
    bad = client.post("/nodes", json={"node_id": "bad id!", "url": "x", "capacity": {"run": 0}})
    assert bad.status_code == 400 and "node_id" in bad.text and "capacity.run" in bad.text
    assert client.post("/nodes/n1/heartbeat", json={"metrics": {"run_inflight": 2}}).status_code == 200
    assert client.post("/nodes/n1/heartbeat", json={"metrics": {"run_inflight": "x"}}).status_code == 400
    (n,) = client.get("/nodes").json()["nodes"]
    assert n["healthy"] and n["metrics"]["run_inflight"] == 2
    assert client.post("/nodes/n1/drain").json()["draining"] is True
    (n,) = client.get("/nodes").json()["nodes"]
    assert not n["healthy"] and client.get("/health").json()["healthy_nodes"] == 0


@pytest.fixture
def manual(tmp_path):
    """A server whose dispatcher is off: the test takes each dispatch itself, with no race."""
    with make(tmp_path, dispatch=False) as t, httpx.Client(base_url=t.url, headers=H, timeout=10) as c:
        yield t, c


def test_next_dispatch_priority_node_and_attempts(manual):
    srv, client = manual
    server = srv.service
    submit(client, task_id="low", num_samples=1)
    high = submit(client, task_id="high", num_samples=1, priority=90)
    assert server.next_dispatch() is None  # no node yet
    client.post("/nodes", json=NODE)
    d = server.next_dispatch()
    assert d.request.session_id == high["session_ids"][0] and d.node.id == "n1" and d.attempt == 1
    assert d.request.callback_url == f"{srv.url}/callbacks/session_result"
    assert d.request.task.task_id == "high"
    assert server.reservations["n1"] == 1
    server.dispatch_failed(d.request.session_id)
    again = server.next_dispatch()
    assert again.request.session_id == d.request.session_id and again.attempt == 2
    assert server.next_dispatch().request.task.task_id == "low"
    assert server.next_dispatch() is None  # nothing left waiting
    session = client.get("/tasks/high").json()["sessions"][0]
    assert session["state"] == "registered" and session["node_id"] == "n1" and session["attempt"] == 2


def test_a_dispatch_whose_answer_was_lost_leaves_a_session_its_node_reported_since(manual):
    """The POST to the node timed out after the node took the session: its reports (and result) came since,
    and the session stays the node's, not re-queued, not an error that would stop the dispatcher."""
    srv, client = manual
    client.post("/nodes", json=NODE)
    running, done = submit(client, task_id="t", num_samples=2)["session_ids"]
    for sid in (srv.service.next_dispatch().request.session_id, srv.service.next_dispatch().request.session_id):
        client.post("/callbacks/session_state", json={"session_id": sid, "state": "running", "node_id": "n1"})
    finish(client, "t", done)
    for sid in (running, done):
        srv.service.dispatch_failed(sid, "dispatch failed: timed out")
    sessions = {s["session_id"]: s for s in client.get("/tasks/t").json()["sessions"]}
    assert (sessions[running]["state"], sessions[running]["node_id"]) == ("running", "n1")
    assert sessions[done]["state"] == "completed"
    assert srv.service.next_dispatch() is None  # nothing went back in the queue


def test_lost_node_requeues_unstarted_and_fails_running(manual):
    srv, client = manual
    client.post("/nodes", json=NODE | {"heartbeat_s": 0.2})  # stale 2 s after its last heartbeat
    ids = submit(client, task_id="t", num_samples=2)["session_ids"]
    for _ in ids:
        srv.service.next_dispatch()
    client.post("/callbacks/session_state", json={"session_id": ids[1], "state": "running", "node_id": "n1"})
    deadline = time.time() + 5
    while time.time() < deadline:  # the reaper notices the missing heartbeats
        states = [s["state"] for s in client.get("/tasks/t").json()["sessions"]]
        if states == ["registered", "error"]:
            break
        time.sleep(0.05)
    sessions = client.get("/tasks/t").json()["sessions"]
    assert [s["state"] for s in sessions] == ["registered", "error"]
    assert sessions[0]["node_id"] is None and sessions[1]["result"]["error"] == "node lost"
    assert sessions[1]["result"]["failure_kind"] == "session_lost"
    assert sessions[1]["result"]["masked"] is True


def test_early_stop_cancels_stragglers(client):
    ids = submit(client, task_id="e", num_samples=4, early_stop_k=2)["session_ids"]
    finish(client, "e", ids[0])
    assert client.get("/tasks/e").json()["status"] == "running"
    finish(client, "e", ids[1])
    task = client.get("/tasks/e").json()
    assert task["status"] == "completed" and task["counts"] == {"completed": 2, "cancelled": 2}


def test_early_stop_counts_a_group_submitted_as_one_task_per_sample(client):
    """NeMo Gym's /run submits each sample of a GRPO group as its own task: the group's early stop
    counts them together and cancels the group's stragglers (masked), other groups untouched."""
    ids = {
        t: submit(client, task_id=t, group_id=g, early_stop_k=2)["session_ids"][0]
        for t, g in (("a0", "A"), ("a1", "A"), ("a2", "A"), ("a3", "A"), ("b0", "B"))
    }
    finish(client, "a0", ids["a0"])
    assert client.get("/tasks/a1").json()["status"] == "running"
    finish(client, "a1", ids["a1"])
    for straggler in ("a2", "a3"):
        task = client.get(f"/tasks/{straggler}").json()
        assert task["status"] == "completed" and task["counts"] == {"cancelled": 1}
        assert task["sessions"][0]["result"]["masked"] is True
    assert client.get("/tasks/b0").json()["status"] == "running"


class FakeNode:
    """Answers every request 2xx and records it: what the rollout server asks of a node, or posts
    to a trainer's callback URL."""

    def __init__(self) -> None:
        self.got: list[tuple[str, str]] = []
        self.bodies: dict[str, list] = {}
        app = Starlette(routes=[Route("/{path:path}", self.any, methods=["GET", "POST", "DELETE"])])
        self.thread = ServerThread(app, "127.0.0.1", free_port(), "fake-node")

    async def any(self, request: Request) -> JSONResponse:
        self.got.append((request.method, request.url.path))
        if body := await request.body():
            self.bodies.setdefault(request.url.path, []).append(orjson.loads(body))
        return JSONResponse({"paused": request.url.path.endswith("pause")}, 202 if request.method == "POST" else 200)

    def __enter__(self) -> FakeNode:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.thread.stop(5)

    def wait(self, method: str, prefix: str, n: int) -> list[str]:
        deadline = time.time() + 5
        while time.time() < deadline:
            paths = [p for m, p in self.got if m == method and p.startswith(prefix)]
            if len(paths) >= n:
                return paths
            time.sleep(0.02)
        raise AssertionError(f"{self.got} has fewer than {n} {method} {prefix}")


def test_callback_url_gets_the_task_result_once(client):
    with FakeNode() as rx:
        url = rx.thread.url + "/done"
        ids = submit(client, task_id="cb", num_samples=2, callback_url=url)["session_ids"]
        for sid in ids:
            finish(client, "cb", sid)
        finish(client, "cb", ids[0])  # a duplicate does not post again
        rx.wait("POST", "/done", 1)
        time.sleep(0.2)
    (got,) = rx.bodies["/done"]
    assert got["task_id"] == "cb" and got["counts"] == {"completed": 2}


def test_events_stream_state_changes(srv, client):
    events: list[dict] = []
    ready = threading.Event()

    def listen() -> None:
        with httpx.stream("GET", srv.url + "/events", headers=H, timeout=10) as r:
            for line in r.iter_lines():
                if line.startswith(": connected"):
                    ready.set()
                if line.startswith("data: "):
                    events.append(orjson.loads(line[6:]))
                    if len(events) >= 2:
                        return

    t = threading.Thread(target=listen, daemon=True)
    t.start()
    assert ready.wait(5)
    sid = submit(client, task_id="ev")["session_ids"][0]
    finish(client, "ev", sid)
    t.join(5)
    assert events[0] == events[0] | {"event": "task", "task_id": "ev", "status": "running"}
    assert events[1] | {"event": "session", "session_id": sid, "state": "completed"} == events[1]


def test_restart_keeps_results_and_ends_in_flight_sessions(tmp_path):
    with make(tmp_path) as srv, httpx.Client(base_url=srv.url, headers=H) as c:
        ids = submit(c, task_id="r", num_samples=3)["session_ids"]
        finish(c, "r", ids[0])
        c.post("/callbacks/session_state", json={"session_id": ids[1], "state": "running", "node_id": "n1"})
    with make(tmp_path) as srv, httpx.Client(base_url=srv.url, headers=H) as c:
        sessions = c.get("/tasks/r").json()["sessions"]
        assert [s["state"] for s in sessions] == ["completed", "error", "registered"]
        assert sessions[0]["result"]["reward"] == 1.0
        assert sessions[1]["result"]["error"] == "rollout server restarted"
        assert [s.id for s in srv.service.recovered] == [ids[1]]


def test_unknown_route_and_method_answer_json(client):
    r = client.get("/nope")
    assert r.status_code == 404 and "/nope" in r.json()["error"]["message"]
    assert client.put("/tasks").status_code == 405


def test_restart_can_keep_sessions_of_live_nodes(tmp_path):
    with make(tmp_path) as srv, httpx.Client(base_url=srv.url, headers=H) as c:
        c.post("/nodes", json=NODE | {"heartbeat_s": 60})
        sid = submit(c, task_id="k")["session_ids"][0]
        c.post("/callbacks/session_state", json={"session_id": sid, "state": "running", "node_id": "n1"})
    with make(tmp_path, keep_live_nodes_on_restart=True) as srv, httpx.Client(base_url=srv.url, headers=H) as c:
        assert c.get("/tasks/k").json()["sessions"][0]["state"] == "running"
        assert finish(c, "k", sid).json()["duplicate"] is False


def test_silent_session_times_out(tmp_path):
    with make(tmp_path, timeout_grace_s=0) as srv, httpx.Client(base_url=srv.url, headers=H) as c:
        sid = submit(c, task_id="slow", session_timeout_s=0.1)["session_ids"][0]
        c.post("/callbacks/session_state", json={"session_id": sid, "state": "initializing", "node_id": "n1"})
        deadline = time.time() + 5
        while c.get("/tasks/slow").json()["status"] != "completed" and time.time() < deadline:
            time.sleep(0.05)
        (s,) = c.get("/tasks/slow").json()["sessions"]
        assert (
            s["state"] == "timeout"
            and s["result"]["masked"] is True
            and s["result"]["failure_kind"] == "agent_timeout"
        )
        assert s["result"]["error"] == "no result within session_timeout_s (its node last reported it initializing)"


def test_cancel_and_early_stop_stop_the_sessions_on_their_node(client):
    with FakeNode() as node:
        client.post("/nodes", json=NODE | {"url": node.thread.url}).raise_for_status()
        ids = submit(client, task_id="c", num_samples=2)["session_ids"]
        assert sorted(node.wait("POST", "/sessions", 2)) == ["/sessions"] * 2  # both dispatched
        client.delete("/tasks/c").raise_for_status()
        assert sorted(node.wait("DELETE", "/sessions/", 2)) == sorted(f"/sessions/{i}" for i in ids)

        ids = submit(client, task_id="k", num_samples=3, early_stop_k=1)["session_ids"]
        node.wait("POST", "/sessions", 5)
        finish(client, "k", ids[0])
        stopped = node.wait("DELETE", "/sessions/", 4)
        assert sorted(stopped[2:]) == sorted(f"/sessions/{i}" for i in ids[1:])


def test_inference_pause_and_resume_reach_every_live_node(client):
    with FakeNode() as a, FakeNode() as b:
        for i, n in enumerate((a, b)):
            client.post("/nodes", json=NODE | {"node_id": f"n{i}", "url": n.thread.url}).raise_for_status()
        r = client.post("/admin/inference/pause", params={"timeout_seconds": 5})
        assert r.status_code == 200 and r.json()["ok"] and set(r.json()["nodes"]) == {"n0", "n1"}
        assert r.json()["nodes"]["n0"]["body"] == {"paused": True}
        assert client.post("/admin/inference/resume").json()["ok"]
        for n in (a, b):
            assert [p for _, p in n.got if p.startswith("/admin")] == [
                "/admin/inference/pause",
                "/admin/inference/resume",
            ]

        async def through_the_client() -> tuple[dict, dict]:
            async with RolloutAPI(client.base_url.__str__(), TOKEN) as api:
                return await api.pause(5), await api.resume("7")

        paused, resumed = asyncio.run(through_the_client())
        assert paused["ok"] and resumed["ok"] and set(paused["nodes"]) == {"n0", "n1"}
        assert [p for _, p in a.got if p.startswith("/admin")][-1] == "/admin/inference/resume"
    assert client.post("/admin/inference/reboot").status_code == 404
    assert httpx.post(client.base_url.join("/admin/inference/pause")).status_code == 401  # no token


def test_a_node_that_registers_again_has_lost_its_sessions(tmp_path):
    with make(tmp_path, dispatch=False) as srv, httpx.Client(base_url=srv.url, headers=H) as client:
        _registers_again(srv, client)


def _registers_again(srv, client):
    client.post("/nodes", json=NODE).raise_for_status()
    ids = submit(client, task_id="re", num_samples=2, harness={"name": "pi"})["session_ids"]
    dispatched = [srv.service.next_dispatch(), srv.service.next_dispatch()]
    assert {d.request.session_id for d in dispatched} == set(ids)
    body = {"session_id": ids[0], "state": "running", "node_id": "n1"}
    client.post("/callbacks/session_state", json=body).raise_for_status()
    client.post("/nodes", json=NODE).raise_for_status()  # its process restarted
    sessions = {s["session_id"]: s for s in client.get("/tasks/re").json()["sessions"]}
    assert sessions[ids[0]]["state"] == "error" and sessions[ids[0]]["result"]["error"] == "node restarted"
    assert sessions[ids[1]]["state"] == "registered"  # never started: dispatched again


def test_a_session_lost_to_silence_is_stopped_on_its_node_too(client):
    """Heartbeats stopped (a node too busy, or cut off): its running session ends masked here, and the
    node is told to stop it rather than run a harness whose result would be ignored."""
    with FakeNode() as node:
        client.post("/nodes", json=NODE | {"url": node.thread.url, "heartbeat_s": 0.1}).raise_for_status()
        (sid,) = submit(client, task_id="quiet")["session_ids"]
        node.wait("POST", "/sessions", 1)
        client.post("/callbacks/session_state", json={"session_id": sid, "state": "running", "node_id": "n1"})
        assert node.wait("DELETE", "/sessions/", 1) == [f"/sessions/{sid}"]
    (s,) = client.get("/tasks/quiet").json()["sessions"]
    assert s["state"] == "error" and s["result"]["masked"] and "node lost" in s["result"]["error"]


def test_a_typo_in_a_plugin_name_is_refused_at_submit_naming_the_known_ones(client):
    """Before, `codx` was accepted here and failed on the node after its sandbox was built, masked."""
    r = client.post("/tasks", json=TASK | {"task_id": "typo", "harness": {"name": "codx"}})
    assert r.status_code == 400
    message = r.json()["error"]["message"]
    assert "harness.name" in message and "unknown harness 'codx'" in message and "codex" in message
    r = client.post("/tasks", json=TASK | {"evaluator": {"kind": "tests", "config": {"timout_s": 5}}})
    assert r.status_code == 400 and "timout_s" in r.json()["error"]["message"]
    r = client.post("/tasks", json=TASK | {"harness": {"name": "pi", "dialect": "grpc"}})
    assert r.status_code == 400 and "pi speaks" in r.json()["error"]["message"]
    assert client.get("/tasks").json() == {"tasks": []}  # nothing was stored
    assert client.get("/tasks/typo").status_code == 404


def test_every_error_has_the_one_control_body(srv, client):
    answers = [
        client.post("/tasks", content=b"{not json"),  # 400
        httpx.post(srv.url + "/tasks", json=TASK),  # 401: no token
        client.get("/tasks/nope"),  # 404
        client.get("/nope"),  # 404 from the router
        client.put("/tasks"),  # 405
    ]
    submit(client, task_id="twice")
    answers.append(client.post("/tasks", json=TASK | {"task_id": "twice"}))  # 409
    for r in answers:
        error = r.json()["error"]
        assert set(error) == {"status", "type", "message"} and error["status"] == r.status_code, r.text
    assert [r.status_code for r in answers] == [400, 401, 404, 404, 405, 409]


def test_session_ids_cannot_be_mistaken_for_keys(client):
    ids = submit(client, task_id="ids", num_samples=2)["session_ids"]
    assert all(i.startswith("session-") and "sk-" not in i for i in ids) and len(set(ids)) == 2


def test_hostile_input_gets_a_4xx_naming_it(tmp_path):
    """A 20 MB instruction, fields nested 300 deep, a task id that is a path, a timeout that is no
    number: each is refused with a 4xx in the one control body, and the server goes on serving."""
    with (
        make(tmp_path, limits={"max_body_bytes": 2**20, "max_depth": 64}) as srv,
        httpx.Client(base_url=srv.url, headers=H, timeout=30) as c,
    ):
        big = c.post("/tasks", json=TASK | {"instruction": "x" * (20 * 2**20)})
        assert big.status_code == 413 and "limit" in big.json()["error"]["message"]
        deep: object = 1
        for _ in range(300):
            deep = [deep]
        nested = c.post("/tasks", json=TASK | {"fields": {"a": deep}})
        assert nested.status_code == 400 and "deeper than 64" in nested.json()["error"]["message"]
        slash = c.post("/tasks", json=TASK | {"task_id": "a/b"})
        assert slash.status_code == 400 and "task_id" in slash.json()["error"]["message"]
        bad = c.post("/admin/inference/pause", params={"timeout_seconds": "abc"})
        assert bad.status_code == 400 and "timeout_seconds" in bad.json()["error"]["message"]
        assert c.get("/health").status_code == 200 and submit(c, task_id="still-fine")["task_id"] == "still-fine"


def test_unsandboxed_tasks_only_where_the_server_allows_them(tmp_path):
    for runtime in ({"sandbox": False}, {"network": "host"}):
        with make(tmp_path / "strict") as strict, httpx.Client(base_url=strict.url, headers=H) as c:
            refused = c.post("/tasks", json=TASK | {"runtime": runtime})
            assert refused.status_code == 403 and "allow_unsandboxed" in refused.json()["error"]["message"]
        with (
            make(tmp_path / "open", allow_unsandboxed=True) as open_,
            httpx.Client(base_url=open_.url, headers=H) as c,
        ):
            assert c.post("/tasks", json=TASK | {"runtime": runtime}).status_code == 201


def test_no_listening_beyond_loopback_without_a_token():
    with pytest.raises(ValueError, match="control_token"):
        RolloutConfig(host="0.0.0.0")
    assert RolloutConfig(host="0.0.0.0", control_token="t").host == "0.0.0.0"
