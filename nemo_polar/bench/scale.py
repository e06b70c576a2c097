"""The rollout server at scale: thousands of concurrent sessions over many gateway nodes.

The rollout server is the real one (`polar serve-rollout`, its own process, SQLite store). The
gateway nodes are simulated in this process, one HTTP server each on its own port: a node
registers, heartbeats its load, accepts dispatches, reports each session's states and delivers a
result after `duration_s` (jittered), so every session is in flight at once. Tasks are GRPO
groups of `group` samples, all submitted at the start.

Reported: dispatch latency (task submitted -> the node holds the session) p50 / p99 / max, the
peak number of sessions in flight, the rollout server's peak memory (VmHWM), the simulated nodes'
memory, and the checks that no session was lost or dispatched twice.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import quantiles
from typing import Any

from aiohttp import web

from ..contracts import NodeCapacity, NodeMetrics, NodeRegistration, SessionResult, TaskSpec
from ..errors import ControlError
from ..server.client import Retry, RolloutAPI
from ..serving import free_port
from ..states import SessionState
from .proxy import rss_mb

TOKEN = "bench-token"
PATIENT = Retry(attempts=20, first_s=0.1, max_s=2.0)  # a simulated node keeps trying, as a real one does


class SimNode:
    """A gateway node as the rollout server sees it: it talks through the same client as a real one."""

    def __init__(self, index: int, api: RolloutAPI, duration_s: float, stats: dict):
        self.id, self.api = f"sim-{index:02d}", api
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))  # bound now: no race for the port with the other nodes
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.duration_s, self.stats = duration_s, stats
        self.rng = random.Random(index)
        self.running: set[str] = set()
        self.tasks: set[asyncio.Task] = set()
        self.runner: web.AppRunner | None = None

    async def start(self, capacity: NodeCapacity) -> None:
        app = web.Application()
        app.router.add_post("/sessions", self.dispatch)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        await web.SockSite(self.runner, self.sock, backlog=4096).start()
        await self.api.register(NodeRegistration(node_id=self.id, url=self.url, capacity=capacity, heartbeat_s=1.0))
        self.tasks.add(asyncio.create_task(self.heartbeat()))

    async def heartbeat(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            try:
                await self.api.heartbeat(self.id, NodeMetrics(run_inflight=len(self.running)))
            except ControlError:
                pass

    async def dispatch(self, request: web.Request) -> web.Response:
        req = await request.json()
        sid = req["session_id"]
        self.stats["received"].append((sid, time.time()))
        if sid in self.running:
            self.stats["duplicates"] += 1
            return web.json_response({"duplicate": True}, status=409)
        self.running.add(sid)
        self.stats["peak"] = max(self.stats["peak"], sum(len(n.running) for n in self.stats["nodes"]))
        task = asyncio.create_task(self.session(sid, req["task"]["task_id"]))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return web.json_response({"accepted": True}, status=202)

    async def session(self, sid: str, task_id: str) -> None:
        for state in (SessionState.INITIALIZING, SessionState.READY, SessionState.RUNNING):
            if not await self.api.report_state(sid, state, self.id, PATIENT):
                self.stats["undelivered"] += 1
        await asyncio.sleep(self.duration_s * self.rng.uniform(0.9, 1.1))
        result = SessionResult(
            session_id=sid, task_id=task_id, status=SessionState.COMPLETED, reward=1.0, node_id=self.id
        )
        if not await self.api.deliver(result, PATIENT):
            self.stats["undelivered"] += 1
        self.running.discard(sid)

    async def stop(self) -> None:
        for t in list(self.tasks):
            t.cancel()
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None


async def _wait_healthy(api: RolloutAPI, proc: subprocess.Popen) -> None:
    for _ in range(600):
        if proc.poll() is not None:
            raise RuntimeError("the rollout server exited at start-up")
        try:
            if (await api.http.send("GET", "/health")).status == 200:
                return
        except ControlError:
            pass
        await asyncio.sleep(0.1)
    raise RuntimeError("the rollout server did not start")


async def _run(sessions: int, nodes: int, group: int, duration_s: float, folder: Path) -> dict[str, Any]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "nemo_polar.cli", "serve-rollout", f"port={port}", f"control_token={TOKEN}"]
    cmd.append(f"store.path={folder / 'rollout.sqlite'}")
    log = open(folder / "rollout.log", "wb")  # noqa: SIM115 - closed in finally
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    stats: dict[str, Any] = {"received": [], "duplicates": 0, "undelivered": 0, "peak": 0, "nodes": []}
    sims: list[SimNode] = []
    try:
        async with RolloutAPI(url, TOKEN, timeout_s=60, connections=256) as api:
            await _wait_healthy(api, proc)
            per_node = -(-sessions // nodes)
            capacity = NodeCapacity(init=8, run=per_node, postrun=8, ready=8)
            sims = [SimNode(i, api, duration_s, stats) for i in range(nodes)]
            stats["nodes"] = sims
            await asyncio.gather(*(s.start(capacity) for s in sims))
            rss_idle = rss_mb(proc.pid, "VmRSS")
            submitted: dict[str, float] = {}
            t0 = time.time()
            for g in range(-(-sessions // group)):
                n = min(group, sessions - g * group)
                task = TaskSpec(task_id=f"t{g:05d}", instruction="x", num_samples=n, harness={"name": "pi"})
                body = await api.http.request("POST", "/tasks", task.model_dump(mode="json"))
                for sid in body["session_ids"]:
                    submitted[sid] = time.time()
            submit_s = time.time() - t0
            while len(stats["received"]) < sessions and time.time() - t0 < duration_s * 0.9:
                await asyncio.sleep(0.05)
            all_dispatched_s = time.time() - t0
            while any(s.running for s in sims) and time.time() - t0 < duration_s * 3 + 60:
                await asyncio.sleep(0.2)
            listed = await api.tasks()
            rss_peak = rss_mb(proc.pid, "VmHWM")
            for sim in sims:  # their heartbeats use the client: stopped before it closes
                await sim.stop()
        latencies = sorted((t - submitted[sid]) * 1000 for sid, t in stats["received"] if sid in submitted)
        completed = sum(t["counts"].get("completed", 0) for t in listed)
        cuts = quantiles(latencies, n=100) if len(latencies) > 1 else [float("nan")] * 99
        return {
            "sessions": sessions,
            "nodes": nodes,
            "group": group,
            "session_duration_s": duration_s,
            "dispatch_latency_ms_p50": round(cuts[49], 1),
            "dispatch_latency_ms_p99": round(cuts[98], 1),
            "dispatch_latency_ms_max": round(latencies[-1], 1) if latencies else None,
            "submit_s": round(submit_s, 2),
            "all_dispatched_s": round(all_dispatched_s, 2),
            "peak_in_flight": stats["peak"],
            "completed": completed,
            "lost": sessions - completed,
            "dispatched_twice": stats["duplicates"] + len(stats["received"]) - len({s for s, _ in stats["received"]}),
            "undelivered_callbacks": stats["undelivered"],
            "rollout_server_rss_mb_idle": rss_idle,
            "rollout_server_rss_mb_peak": rss_peak,
            "sim_nodes_rss_mb": rss_mb(os.getpid(), "VmHWM"),
        }
    finally:
        for s in sims:
            await s.stop()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        log.close()


def run(sessions: int = 2000, nodes: int = 16, group: int = 8, duration_s: float = 40.0) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="polar-scale-") as folder:
        return asyncio.run(_run(sessions, nodes, group, duration_s, Path(folder)))
