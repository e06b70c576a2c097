"""The control plane's one HTTP client, for every control-plane call:

    RolloutAPI   what gateway nodes, `polar status`, `polar up` and the Gym servers ask a rollout server
    NodeAPI      what the rollout server asks its gateway nodes (dispatch, stop, pause/resume) and
                 trainers (the task-result callback)

Both sit on `ControlClient`: aiohttp, one pooled session per client, created on first use in the
caller's event loop. aiohttp rather than httpx: httpx's pool scanned every connection per request,
which made a burst of 2,000 dispatches quadratic (docs/benchmarks.md: the rollout server at scale). The
proxy's upstream calls, on the hot path, keep their own measured client (`proxy/upstream.py`).

One error mapping: no answer (refused, reset, timed out) is `ControlUnreachable`; an answer with
status >= 400 is `ControlRefused` with that status and body. One retry policy (`Retry`): no answer
and 5xx are tried again with a doubling delay; a 4xx never is (asking again would not help).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson

from ..contracts import DispatchRequest, NodeMetrics, NodeRegistration, SessionResult, TaskSpec
from ..control import token_headers
from ..errors import ControlRefused, ControlUnreachable
from ..states import TERMINAL, SessionState

log = logging.getLogger("nemo_polar.control")
_JSON = {"content-type": "application/json"}


@dataclass(frozen=True)
class Retry:
    """`attempts` tries in all; the waits between them double from `first_s`, capped at `max_s`."""

    attempts: int = 1
    first_s: float = 0.2
    max_s: float = 5.0

    def delay(self, attempt: int) -> float:
        return min(self.first_s * 2**attempt, self.max_s)


ONCE = Retry()


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any  # the JSON answer, or the first 200 characters of a body that is not JSON

    @property
    def ok(self) -> bool:
        return self.status < 400


class ControlClient:
    """Requests to one base URL (or to absolute URLs), JSON in and out, with the control token."""

    def __init__(self, base_url: str = "", token: str | None = None, timeout_s: float = 10.0, connections: int = 100):
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        self.connections = connections
        self._http: aiohttp.ClientSession | None = None

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                connector=aiohttp.TCPConnector(limit=self.connections),
            )
        return self._http

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def __aenter__(self) -> ControlClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def url(self, path: str) -> str:
        return path if "://" in path else self.base_url + path

    async def send(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        retry: Retry = ONCE,
        token: str | None = None,
        timeout_s: float | None = None,
    ) -> Answer:
        """Whatever the peer answered (5xx tried again per `retry`); `ControlUnreachable` when it never did."""
        url = self.url(path)
        data = None if body is None else orjson.dumps(body)
        headers = _JSON | token_headers(token or self.token)
        timeout = aiohttp.ClientTimeout(total=timeout_s) if timeout_s is not None else None
        failure: Exception | None = None
        answer: Answer | None = None
        for attempt in range(retry.attempts):
            if attempt:
                await asyncio.sleep(retry.delay(attempt - 1))
            try:
                async with self._session().request(method, url, data=data, headers=headers, timeout=timeout) as r:
                    answer = Answer(r.status, _decode(await r.read()))
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                failure, answer = exc, None
                log.debug("%s %s: no answer (try %d): %r", method, url, attempt + 1, exc)
                continue
            if answer.status < 500:
                return answer
        if answer is not None:
            return answer
        raise ControlUnreachable(f"{method} {url}: unreachable: {failure!r}")

    async def request(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        """The JSON answer; `ControlRefused` for any status >= 400."""
        answer = await self.send(method, path, body, **kw)
        if not answer.ok:
            raise ControlRefused(
                f"{method} {self.url(path)} answered {answer.status}: {answer.body}",
                status_code=answer.status,
                body=answer.body,
            )
        return answer.body


def _decode(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw[:200].decode("utf-8", "replace")


class RolloutAPI:
    """A rollout server's REST API (docs/rollout.md)."""

    def __init__(
        self,
        url: str,
        control_token: str | None = None,
        poll_interval_s: float = 1.0,
        timeout_s: float = 60.0,
        connections: int = 100,
    ):
        self.url = url.rstrip("/")
        self.poll_interval_s = poll_interval_s
        self.http = ControlClient(self.url, control_token, timeout_s, connections)

    async def close(self) -> None:
        await self.http.close()

    async def __aenter__(self) -> RolloutAPI:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- what trainers, `polar up` and `polar status` ask
    async def submit(self, task: TaskSpec) -> str:
        body = await self.http.request("POST", "/tasks", task.model_dump(mode="json"))
        return body["task_id"]

    async def task(self, task_id: str) -> dict[str, Any]:
        return await self.http.request("GET", f"/tasks/{quote(task_id)}")

    async def tasks(self, status: str | None = None) -> list[dict[str, Any]]:
        query = f"?status={quote(status)}" if status else ""
        return (await self.http.request("GET", "/tasks" + query))["tasks"]

    async def nodes(self) -> list[dict[str, Any]]:
        return (await self.http.request("GET", "/nodes"))["nodes"]

    async def cancel(self, task_id: str) -> None:
        """Best effort: a task that cannot be cancelled is logged, not raised."""
        try:
            await self.http.request("DELETE", f"/tasks/{quote(task_id)}")
        except (ControlUnreachable, ControlRefused) as exc:
            log.warning("could not cancel task %s: %s", task_id, exc)

    async def wait(self, task_id: str, timeout_s: float) -> dict[str, Any]:
        """The task's only session (with its `result`) once final, by polling GET /tasks/{id}: one cheap
        read per interval, and it survives the server's restarts (it keeps every task). No answer and
        5xx are asked again; a refusal (404: no such task) is raised at once."""
        deadline = time.monotonic() + timeout_s
        delay, last_error = min(0.2, self.poll_interval_s), None
        while time.monotonic() < deadline:
            try:
                body = await self.task(task_id)
                sessions = body.get("sessions") or []
                if sessions and SessionState(sessions[0]["state"]) in TERMINAL and sessions[0].get("result"):
                    return sessions[0]
            except ControlUnreachable as exc:
                last_error = exc
            except ControlRefused as exc:
                if exc.status_code < 500:
                    raise
                last_error = exc
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.poll_interval_s)
        raise ControlUnreachable(f"task {task_id}: no final session within {timeout_s:.0f}s (last: {last_error!r})")

    async def pause(self, timeout_s: float = 300) -> dict[str, Any]:
        """Weight update: every live node holds new model calls and new RUN starts; answers once drained."""
        return await self.http.request(
            "POST", f"/admin/inference/pause?timeout_seconds={timeout_s}", timeout_s=timeout_s + 30
        )

    async def resume(self, policy_version: str | None = None) -> dict[str, Any]:
        """After a weight update; `policy_version` is recorded on every later call."""
        query = f"?policy_version={quote(policy_version)}" if policy_version is not None else ""
        return await self.http.request("POST", "/admin/inference/resume" + query)

    # --- what gateway nodes say
    async def register(self, registration: NodeRegistration) -> None:
        await self.http.request("POST", "/nodes", registration.model_dump(mode="json"))

    async def heartbeat(self, node_id: str, metrics: NodeMetrics) -> dict[str, Any]:
        return await self.http.request("POST", f"/nodes/{quote(node_id)}/heartbeat", {"metrics": metrics.model_dump()})

    async def report_state(self, session_id: str, state: SessionState, node_id: str, retry: Retry = ONCE) -> bool:
        body = {"session_id": session_id, "state": state.value, "node_id": node_id}
        return await self._deliver("/callbacks/session_state", body, retry)

    async def deliver(self, result: SessionResult | dict[str, Any], retry: Retry = ONCE) -> bool:
        body = result.model_dump(mode="json") if isinstance(result, SessionResult) else result
        return await self._deliver("/callbacks/session_result", body, retry)

    async def _deliver(self, path: str, body: dict[str, Any], retry: Retry) -> bool:
        """True once the server answered, a refusal included (sending it again would not help)."""
        try:
            answer = await self.http.send("POST", path, body, retry=retry)
        except ControlUnreachable as exc:
            log.warning("could not post %s for %s yet: %s", path, body.get("session_id"), exc)
            return False
        if answer.status >= 500:
            log.warning(
                "could not post %s for %s yet: %s %s", path, body.get("session_id"), answer.status, answer.body
            )
            return False
        if answer.status >= 400:
            log.warning("rollout server refused %s: %s", path, answer.body)
        return True


@dataclass(frozen=True)
class NodeTarget:
    """Where a node listens and the token its own routes want (from its registration)."""

    node_id: str
    url: str
    token: str | None

    @classmethod
    def of(cls, registration: NodeRegistration) -> NodeTarget:
        return cls(registration.node_id, registration.url.rstrip("/"), registration.token)


class NodeAPI:
    """What the rollout server asks of its gateway nodes, and posts to trainers' callback URLs."""

    def __init__(self, timeout_s: float = 10.0, connections: int = 64):
        self.http = ControlClient(timeout_s=timeout_s, connections=connections)

    async def close(self) -> None:
        await self.http.close()

    async def dispatch(self, node: NodeTarget, request: DispatchRequest) -> None:
        """The node holds the session once this returns (409: it already had it, which is as good)."""
        answer = await self.http.send(
            "POST", node.url + "/sessions", request.model_dump(mode="json"), token=node.token
        )
        if answer.status not in (200, 202, 409):
            raise ControlRefused(
                f"POST {node.url}/sessions answered {answer.status}: {answer.body}",
                status_code=answer.status,
                body=answer.body,
            )

    async def fan_out(
        self, method: str, targets: Iterable[tuple[NodeTarget, str]], timeout_s: float | None = None
    ) -> dict[str, dict[str, Any]]:
        """One request to each (node, path) at once; by node id, its answer or why there was none. Best effort."""
        targets = list(targets)

        async def one(node: NodeTarget, path: str) -> dict[str, Any]:
            try:
                answer = await self.http.send(method, node.url + path, token=node.token, timeout_s=timeout_s)
            except ControlUnreachable as exc:
                log.warning("%s %s%s: %s", method, node.url, path, exc)
                return {"status": None, "error": exc.message}
            if answer.status >= 500:
                log.warning("%s %s%s answered %s: %s", method, node.url, path, answer.status, answer.body)
            return {"status": answer.status, "body": answer.body}

        answers = await asyncio.gather(*(one(n, p) for n, p in targets))
        return {n.node_id: a for (n, _), a in zip(targets, answers, strict=True)}

    async def stop(self, sessions: Iterable[tuple[NodeTarget, str]]) -> None:
        """DELETE /sessions/{id} on the nodes that hold them: their slots free up, their results are ignored."""
        await self.fan_out("DELETE", [(node, f"/sessions/{quote(sid)}") for node, sid in sessions])

    async def post_callback(self, url: str, body: dict[str, Any], timeout_s: float) -> None:
        """A task's result to its trainer: best effort, once (the trainer can always poll GET /tasks/{id})."""
        try:
            answer = await self.http.send("POST", url, body, timeout_s=timeout_s)
            log.info("task %s result posted to %s: %s", body.get("task_id"), url, answer.status)
        except ControlUnreachable as exc:
            log.warning("task %s result could not be posted to %s: %s", body.get("task_id"), url, exc)


__all__ = ["Answer", "ControlClient", "NodeAPI", "NodeTarget", "Retry", "RolloutAPI"]
