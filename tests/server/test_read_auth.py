"""Every control route of the rollout server, a gateway node and a standalone proxy, tried with no token, a
wrong one and the right one, on real servers: only `/health`, `/metrics` (and the proxy's model list) answer
without the token, and a task's secrets (its `env` values, the keys it marks secret) are never shown, in any
answer, in `polar view`, in the task-result callback or in a log line, while the node still runs the harness
with the real values.

`pytest tests/server/test_read_auth.py -s` prints the route table that docs/security.md shows.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from nemo_polar import logs
from nemo_polar.bench.fake_upstream import FakeUpstreamThread
from nemo_polar.config import ProxyConfig
from nemo_polar.proxy.app import Proxy
from nemo_polar.proxy.serve import free_port
from nemo_polar.redaction import MASK
from nemo_polar.server.gateway.node import GatewayNode, NodeConfig, NodeThread
from nemo_polar.server.rollout import RolloutConfig, RolloutThread
from nemo_polar.serving import ServerThread
from nemo_polar.view.app import ViewThread
from nemo_polar.view.sources import RunSource
from tests.conftest import make_proxy

TOKEN = "the-right-token"
WRONG = "a-wrong-token"
SECRET = "sk-secret-123"  # a harness env value
RUNTIME_SECRET = "runtime-secret-456"  # a runtime env value
MARKED = "marked-secret-789"  # a dataset field the task marks secret
SECRETS = (SECRET, RUNTIME_SECRET, MARKED)
SLEEPER = {"name": "shell", "command": "sleep 30", "env": {"API_TOKEN": SECRET}}
TASK = {
    "instruction": "Say hello.",
    "harness": SLEEPER,
    "runtime": {"env": {"OTHER_TOKEN": RUNTIME_SECRET}},
    "fields": {"db_password": MARKED, "repo": "demo"},
    "secret_keys": ["db_password"],
    "agent_timeout_s": 60,
}


@dataclass(frozen=True)
class R:
    """One route: `server` (rollout, node, proxy), its method and pattern, how to call it, and what the right
    token gets; `open` routes answer the same to everyone."""

    server: str
    method: str
    pattern: str
    path: str = ""
    body: Any = None
    right: int = 200
    open: bool = False

    @property
    def id(self) -> str:
        return f"{self.server} {self.method} {self.pattern}"


ADMIN = [
    ("POST", "/admin/sessions", "/admin/sessions", {}, 201),
    ("POST", "/admin/sessions/{session_id}/close", "/admin/sessions/{closing}/close", None, 200),
    ("GET", "/admin/sessions/{session_id}/completions", "/admin/sessions/{capture}/completions", None, 200),
    ("GET", "/admin/inference/status", "/admin/inference/status", None, 200),
    ("POST", "/admin/inference/pause", "/admin/inference/pause?timeout_seconds=5", None, 200),
    ("POST", "/admin/inference/resume", "/admin/inference/resume", None, 200),
]
OPEN = [R(s, "GET", p, open=True) for s in ("rollout", "node", "proxy") for p in ("/health", "/metrics")] + [
    R(s, "GET", "/v1/models", open=True) for s in ("node", "proxy")
]
ROUTES = [
    *OPEN,
    R("rollout", "GET", "/tasks"),
    R("rollout", "GET", "/tasks/{task_id}", "/tasks/t-shown"),
    R("rollout", "GET", "/nodes"),
    R("rollout", "GET", "/events"),
    R("rollout", "POST", "/tasks", body="{new_task}", right=201),
    R("rollout", "DELETE", "/tasks/{task_id}", "/tasks/t-cancel"),
    R("rollout", "POST", "/nodes", body="{registration}", right=201),
    R("rollout", "POST", "/nodes/{node_id}/heartbeat", "/nodes/n1/heartbeat", {"metrics": {}}),
    R("rollout", "POST", "/nodes/{node_id}/drain", "/nodes/n-spare/drain"),
    R("rollout", "POST", "/callbacks/session_result", body="{duplicate_result}"),
    R("rollout", "POST", "/callbacks/session_state", body="{state_report}"),
    R("rollout", "POST", "/admin/inference/{action}", "/admin/inference/pause?timeout_seconds=5"),
    R("node", "GET", "/sessions/{session_id}", "/sessions/{running}"),
    R("node", "POST", "/sessions", body="{dispatch}", right=202),
    R("node", "DELETE", "/sessions/{session_id}", "/sessions/{stopping}"),
    *(R("node", m, pattern, path, body, right) for m, pattern, path, body, right in ADMIN),
    *(R("proxy", m, pattern, path, body, right) for m, pattern, path, body, right in ADMIN),
]


@dataclass
class World:
    rollout: str
    node: str
    proxy: str
    node_token: str
    values: dict[str, Any]
    callbacks: list[dict] = field(default_factory=list)
    bodies: list[str] = field(default_factory=list)  # every answer read, to look for the secrets in
    table: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    routes: dict[str, list[Any]] = field(default_factory=dict)  # what each server serves
    store: Any = None  # the rollout server's store
    folder: Any = None  # where the stores are

    def token(self, server: str) -> str:
        return self.node_token if server == "node" else TOKEN

    def fill(self, value: Any) -> Any:
        if isinstance(value, str) and value.startswith("{") and value.endswith("}") and value[1:-1] in self.values:
            return self.values[value[1:-1]]
        if isinstance(value, str):
            return value.format(**{k: v for k, v in self.values.items() if isinstance(v, str)})
        return value

    def call(self, route: R, token: str | None) -> int:
        base = {"rollout": self.rollout, "node": self.node, "proxy": self.proxy}[route.server]
        headers = {"x-polar-control-token": token} if token else {}
        path, body = self.fill(route.path or route.pattern), self.fill(route.body)
        if route.pattern.endswith("/events"):  # a stream: its status, and what it says first
            with httpx.stream("GET", base + path, headers=headers, timeout=10) as r:
                self.bodies.append(next(r.iter_text(), ""))
                return r.status_code
        r = httpx.request(route.method, base + path, json=body, headers=headers, timeout=30)
        self.bodies.append(r.text)
        return r.status_code

    def check(self, route: R) -> tuple[int, int, int]:
        if route.id not in self.table:
            right = self.call(route, self.token(route.server))  # first: a write must not be refused for its effect
            self.table[route.id] = (self.call(route, None), self.call(route, WRONG), right)
        return self.table[route.id]


def wait_for(what, timeout_s: float = 60):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if got := what():
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out: {what}")


@contextmanager
def callback_server(bodies: list[dict]) -> Iterator[ServerThread]:
    """A trainer's end of the task-result callback: what it was posted."""

    async def receive(request: Request) -> JSONResponse:
        bodies.append(await request.json())
        return JSONResponse({"ok": True})

    thread = ServerThread(Starlette(routes=[Route("/done", receive, methods=["POST"])]), "127.0.0.1", free_port())
    thread.start()
    try:
        yield thread
    finally:
        thread.stop(10)


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("reads")
    callbacks: list[dict] = []
    rollout_cfg = RolloutConfig(
        port=0, control_token=TOKEN, dispatch=False, store={"path": str(tmp / "rollout.sqlite")}
    )
    with (
        FakeUpstreamThread() as upstream,
        callback_server(callbacks) as sink,
        RolloutThread(rollout_cfg) as rollout,
        make_proxy(upstream.url, tmp / "alone", control_token=TOKEN) as alone,
    ):
        port = free_port()
        proxy = Proxy(
            ProxyConfig.model_validate(
                {"port": port, "store": {"path": str(tmp / "records.sqlite")}, "upstream": {"url": upstream.url}}
            )
        )
        node_url = f"http://127.0.0.1:{port}"
        node = GatewayNode(
            NodeConfig(
                node_id="n1",
                rollout_url=rollout.url,
                public_url=node_url,
                root=str(tmp / "node"),
                heartbeat_s=0.2,
                control_token=TOKEN,
            ),
            proxy,
        )
        with NodeThread(node, "127.0.0.1", port):
            right = {"x-polar-control-token": TOKEN}
            to_node = {"x-polar-control-token": node.control_token}
            wait_for(lambda: httpx.get(rollout.url + "/nodes", headers=right).json()["nodes"])

            def submit(task_id: str, **kw: Any) -> list[str]:
                r = httpx.post(rollout.url + "/tasks", json=TASK | {"task_id": task_id} | kw, headers=right)
                assert r.status_code == 201, r.text
                return r.json()["session_ids"]

            def dispatch(session_id: str, task_id: str) -> dict:
                return {
                    "session_id": session_id,
                    "task": TASK | {"task_id": task_id},
                    "callback_url": rollout.url + "/callbacks/session_result",
                }

            # a task whose two sessions ended, one with an error that repeats its secrets, and a callback
            shown = submit("t-shown", num_samples=2, callback_url=sink.url + "/done")
            for sid in shown:
                result = {"session_id": sid, "task_id": "t-shown", "status": "error", "masked": True, "node_id": "n1"}
                result["error"] = f"prepare failed: it printed API_TOKEN={SECRET} OTHER={RUNTIME_SECRET} {MARKED}"
                result["stats"] = {"stdout_tail": f"API_TOKEN={SECRET}\n"}
                httpx.post(rollout.url + "/callbacks/session_result", json=result, headers=right).raise_for_status()
            wait_for(lambda: callbacks)
            # sessions running on the node, its harness given the real env
            running, stopping, fresh = submit("t-run", num_samples=3)
            for sid in (running, stopping):
                r = httpx.post(node_url + "/sessions", json=dispatch(sid, "t-run"), headers=to_node)
                assert r.status_code == 202, r.text
            wait_for(lambda: httpx.get(f"{node_url}/sessions/{running}", headers=to_node).json()["state"] == "running")
            assert node.jobs[running].data.request.task.harness.options["env"] == {"API_TOKEN": SECRET}
            capture = httpx.post(node_url + "/admin/sessions", json={}, headers=to_node).json()["session_id"]
            closing = httpx.post(node_url + "/admin/sessions", json={}, headers=to_node).json()["session_id"]
            submit("t-cancel")
            # a second node (the standalone proxy stands in for its /admin routes): registered, drained
            registration = {"node_id": "n-spare", "url": alone.url, "heartbeat_s": 60, "token": TOKEN}
            httpx.post(rollout.url + "/nodes", json=registration, headers=right).raise_for_status()
            values = {
                "running": running,
                "stopping": stopping,
                "capture": capture,
                "closing": closing,
                "new_task": TASK | {"task_id": "t-new-" + uuid.uuid4().hex[:8]},
                "registration": registration,
                "duplicate_result": {"session_id": shown[0], "task_id": "t-shown", "status": "completed"},
                "state_report": {"session_id": fresh, "state": "initializing", "node_id": "n1"},
                "dispatch": dispatch(fresh, "t-run"),
            }
            served = {
                "rollout": rollout.server.app.routes,
                "node": [r for r in node.app.routes if r.path] + proxy.starlette.routes,  # the proxy mounted at /
                "proxy": alone.proxy.starlette.routes,
            }
            world = World(rollout.url, node_url, alone.url, node.control_token, values, callbacks)
            world.routes, world.store, world.folder = served, rollout.service.store, tmp
            yield world
        proxy.store.close()


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.id)
def test_every_route_wants_the_token_unless_it_is_open(world, route):
    none, wrong, right = world.check(route)
    if route.open:
        assert (none, wrong, right) == (200, 200, 200), route
    else:
        assert (none, wrong, right) == (401, 401, route.right), route


def test_every_route_of_the_three_servers_is_in_the_table(world):
    """A control route added later is tried here too, or this fails."""
    control = ("/admin", "/health", "/metrics", "/sessions", "/tasks", "/nodes", "/callbacks", "/events")
    served = {
        (server, m, r.path)
        for server, routes in world.routes.items()
        for r in routes
        for m in getattr(r, "methods", None) or ()
        if m != "HEAD" and r.path.startswith(control)
    }
    tried = {(r.server, r.method, r.pattern) for r in ROUTES}
    assert served <= tried, served - tried


def test_no_answer_shows_a_secret(world):
    for route in ROUTES:
        world.check(route)
    right = {"x-polar-control-token": TOKEN}
    task = httpx.get(world.rollout + "/tasks/t-shown", headers=right).json()
    world.bodies.append(str(task))
    assert task["spec"]["harness"]["env"] == {"API_TOKEN": MASK}
    assert task["spec"]["runtime"]["env"] == {"OTHER_TOKEN": MASK}
    assert task["spec"]["fields"] == {"db_password": MASK, "repo": "demo"}
    assert task["sessions"][0]["result"]["error"].count(MASK) == 3
    seen = "\n".join(world.bodies)
    assert len(world.bodies) >= 3 * len(ROUTES)
    for secret in SECRETS:
        assert secret not in seen
    # the store keeps what the node needs: the real values
    stored = world.store.task("t-shown").spec
    assert stored.harness.options["env"] == {"API_TOKEN": SECRET} and stored.fields["db_password"] == MARKED


def test_the_task_result_callback_shows_no_secret(world):
    (body,) = world.callbacks
    assert body["task_id"] == "t-shown" and body["spec"]["harness"]["env"] == {"API_TOKEN": MASK}
    for secret in SECRETS:
        assert secret not in str(body)


def test_polar_view_shows_no_secret(world):
    source = RunSource(world.folder / "rollout.sqlite", world.folder / "records.sqlite")
    with ViewThread(source) as view:
        tasks = httpx.get(view.url + "/api/tasks", timeout=30)
        sid = next(t for t in tasks.json()["tasks"] if t["task_id"] == "t-shown")["sessions"][0]["session_id"]
        session = httpx.get(f"{view.url}/api/sessions/{sid}", timeout=30)
    assert tasks.status_code == 200 and session.status_code == 200
    assert MASK in tasks.text and MASK in session.text  # the error was there, and it is masked
    for secret in SECRETS:
        assert secret not in tasks.text and secret not in session.text


def test_log_lines_show_no_secret_of_a_task_taken(world, caplog):
    """The node took the task (and the rollout server too): their process's log lines mask its secrets."""
    before = logging.getLogRecordFactory()
    logs.install()
    try:
        log = logging.getLogger("nemo_polar.server.gateway.stages")
        with caplog.at_level(logging.INFO):
            log.warning("step failed: API_TOKEN=%s OTHER=%s field=%s", SECRET, RUNTIME_SECRET, MARKED)
            try:
                raise RuntimeError(f"the harness printed {SECRET}")
            except RuntimeError:
                log.exception("RUN of a session failed")
        text = caplog.text
    finally:
        logging.setLogRecordFactory(before)
    assert "step failed" in text and "the harness printed" in text and MASK in text
    for secret in SECRETS:
        assert secret not in text


def test_the_route_table(world):
    """Printed with -s, as docs/security.md shows it."""
    for route in ROUTES:
        world.check(route)
    lines = ["| server | route | no token | wrong token | right token |", "|---|---|---|---|---|"]
    for route in ROUTES:
        none, wrong, right = world.table[route.id]
        lines.append(f"| {route.server} | `{route.method} {route.pattern}` | {none} | {wrong} | {right} |")
    print("\n" + "\n".join(lines))
    assert len(lines) == len(ROUTES) + 2
