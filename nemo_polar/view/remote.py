"""A running rollout server as the page's source, through the control-plane client (`RolloutAPI`).

Tasks and sessions come from `GET /tasks` and `GET /tasks/{id}` (a finished task is asked once); a
session's calls from the gateway node that ran it (`GET {node}/admin/sessions/{proxy session}/completions`,
with the node's token when its routes want one), once its result names its capture session. The
version is what `GET /tasks` says of every task (status, sessions by state), asked once a second by
the page's change feed, so the page follows the run as it goes.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any
from urllib.parse import quote

from ..errors import NotFound
from ..records import CompletionRecord
from ..server.client import RolloutAPI
from .sources import session_row, task_entry


class RolloutSource:
    kind = "rollout"
    model_dir = None

    def __init__(self, url: str, node_token: str | None = None, control_token: str | None = None):
        self.label = url
        self.api = RolloutAPI(url, control_token=control_token, timeout_s=30)
        self.node_token = node_token or control_token
        self._final: dict[str, dict[str, Any]] = {}  # finished tasks' bodies: they no longer change
        self._task_of: dict[str, str] = {}

    async def _task(self, task_id: str) -> dict[str, Any]:
        if task_id in self._final:
            return self._final[task_id]
        body = await self.api.task(task_id)
        if body["status"] != "running":
            self._final[task_id] = body
        for s in body.get("sessions", []):
            self._task_of[s["session_id"]] = task_id
        return body

    async def listing(self) -> list[dict[str, Any]]:
        tasks = await self.api.tasks()
        bodies = await asyncio.gather(*(self._task(t["task_id"]) for t in tasks))
        out = []
        for body in bodies:
            task = task_entry(body["task_id"], body["status"], body.get("spec"), body.get("created_at"))
            task["sessions"] = [session_row(task, s) for s in body.get("sessions", [])]
            out.append(task)
        return out

    async def session(self, session_id: str) -> tuple[dict[str, Any], list[CompletionRecord]]:
        if session_id not in self._task_of:
            await self.listing()
        task_id = self._task_of.get(session_id)
        if task_id is None:
            raise NotFound(f"no session {session_id!r} on {self.label}")
        body = await self._task(task_id)
        task = task_entry(body["task_id"], body["status"], body.get("spec"), body.get("created_at"))
        s = next(s for s in body["sessions"] if s["session_id"] == session_id)
        instruction = (body.get("spec") or {}).get("instruction")
        row = session_row(task, s) | {"result": s.get("result"), "instruction": instruction}
        return row, await self._records(row)

    async def _records(self, row: dict[str, Any]) -> list[CompletionRecord]:
        """The session's calls from its node; none before its result names them (or when the node is gone)."""
        psid, node_id = row.get("proxy_session_id"), row.get("node_id")
        if not psid or not node_id:
            return []
        nodes = {n["node_id"]: n for n in await self.api.nodes()}
        node = nodes.get(node_id)
        if node is None:
            return []
        url = node["registration"]["url"].rstrip("/") + f"/admin/sessions/{quote(psid)}/completions"
        body = await self.api.http.request("GET", url, token=self.node_token)
        return [CompletionRecord.model_validate(r) for r in body.get("data", [])]

    async def version(self) -> str:
        tasks = await self.api.tasks()
        seen = "|".join(f"{t['task_id']}:{t['status']}:{sorted(t.get('counts', {}).items())}" for t in tasks)
        return hashlib.sha1(seen.encode()).hexdigest()

    async def close(self) -> None:
        await self.api.close()
