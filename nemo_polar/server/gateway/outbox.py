"""A gateway node's outbox: each session's result is written here before it is sent and removed once
the rollout server acknowledges it. Whatever is left (the server was down, the node was restarted) is
sent again with every heartbeat, and before the node registers (`heartbeat.py`). The server keeps
the first result it gets, so a retry is never counted twice. The event loop serves the harnesses'
calls: the files are read and written in worker threads."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import orjson

from ...contracts import SessionResult
from ..client import Retry, RolloutAPI


class Outbox:
    def __init__(self, folder: Path, rollout: RolloutAPI, attempts: int):
        self.folder, self.rollout = folder, rollout
        self.attempts = attempts  # tries of a result's first delivery before it waits here for a heartbeat
        folder.mkdir(parents=True, exist_ok=True)
        self._delivering: set[str] = set()  # files whose first delivery is under way

    def count(self) -> int:
        return sum(1 for _ in self.folder.glob("*.json"))

    def _path(self, result: SessionResult) -> Path:
        return self.folder / f"{result.session_id}.json"

    async def keep(self, result: SessionResult) -> None:
        """Written before it is sent: a node that dies now sends it when it starts again."""
        await asyncio.to_thread(_write_atomic, self._path(result), result.model_dump_json())

    async def send(self, result: SessionResult) -> None:
        """A kept result's first delivery; removed once acknowledged."""
        path = self._path(result)
        self._delivering.add(path.name)
        try:
            if await self.rollout.deliver(result, Retry(attempts=self.attempts)):
                await asyncio.to_thread(path.unlink, True)
            # else it stays in the outbox: the heartbeat loop sends it again
        finally:
            self._delivering.discard(path.name)

    async def flush(self) -> None:
        """Every result still here, sent again, oldest name first; stops at the first the server does not take."""
        for path in sorted(await asyncio.to_thread(lambda: list(self.folder.glob("*.json")))):
            if path.name in self._delivering:  # its own delivery is still trying: not twice at once
                continue
            if not await self.rollout.deliver(orjson.loads(await asyncio.to_thread(path.read_bytes))):
                return  # the server is still away: the next heartbeat tries again
            await asyncio.to_thread(path.unlink, True)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f"{path.stem}.{threading.get_ident()}.tmp")  # two writers of one result never share one
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)  # a crash leaves the old file or the new one, never half of one
