"""A gateway node: the proxy plus the staged pipeline, registered with a rollout server.

One HTTP server per node: the harnesses' model API (the proxy) and the node's routes (`routes.py`).
It registers at start-up and heartbeats its stage metrics (`heartbeat.py`), reports every state
change, and delivers each session's result through its outbox (`outbox.py`: written before it is
sent, sent again with every heartbeat until acknowledged). The proxy's /admin/inference/pause and
/resume (weight updates) also hold and release new RUN starts here: running sessions keep their
sandboxes and only their model calls wait at the gate.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import shutil
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from pydantic import Field
from starlette.applications import Starlette
from starlette.exceptions import HTTPException

from ...config import ProxyConfig, Strict
from ...contracts import DispatchRequest, NodeCapacity, NodeMetrics, NodeRegistration, SessionResult
from ...control import http_error
from ...metrics import NodeGauges
from ...proxy.app import Proxy
from ...redaction import hide
from ...runtimes import RUNTIMES
from ...serving import ServerThread, run
from ...states import SessionState
from ..client import Retry, RolloutAPI
from .heartbeat import Heartbeat
from .outbox import Outbox
from .pipeline import Job, Pipeline
from .proxy_surface import ProxySurface
from .routes import NodeRoutes
from .stages import HarnessStages, Work

log = logging.getLogger("nemo_polar.gateway")
STATE_REPORT = Retry(attempts=3)


class NodeConfig(Strict):
    node_id: str = Field("node-0", description="the node's name at the rollout server: unique among its nodes")
    rollout_url: str = Field("http://127.0.0.1:8900", description="the rollout server this node registers with")
    public_url: str | None = Field(
        None, description="how the rollout server and harnesses reach us (default: the proxy)"
    )
    root: str = Field("runs/node", description="session folders, traces and the result outbox")
    capacity: NodeCapacity = NodeCapacity()
    heartbeat_s: float = Field(
        2.0, gt=0, description="seconds between heartbeats to the rollout server (its free slots, its store's health)"
    )
    result_attempts: int = Field(8, ge=1, description="tries per result before it waits in the outbox")
    control_token: str | None = Field(None, description="the rollout server's, when it has one")


class GatewayConfig(Strict):
    """`polar serve-gateway`: the node listens where its proxy is configured to."""

    proxy: ProxyConfig = Field(ProxyConfig(), description="the node's proxy: the harnesses' model API and its routes")
    node: NodeConfig = NodeConfig()


class GatewayNode:
    def __init__(self, config: NodeConfig, proxy: Proxy | ProxySurface):
        self.proxy: ProxySurface = proxy
        if config.public_url is None:
            proxy_config = proxy.config if isinstance(proxy, Proxy) else None
            assert proxy_config is not None, "NodeConfig.public_url is required with a proxy surface"
            config = config.model_copy(update={"public_url": f"http://{proxy_config.host}:{proxy_config.port}"})
        self.config = config
        self.control_token = self.proxy.control_token or secrets.token_urlsafe(24)
        root = Path(config.root).resolve()
        self.rollout = RolloutAPI(config.rollout_url, config.control_token, timeout_s=10.0)
        self.outbox = Outbox(root / "outbox", self.rollout, config.result_attempts)
        _sweep(root, keep={"outbox", "traces", "logs"})
        _reap(root)
        self.stages = HarnessStages(self.proxy, config.public_url, root, config.node_id, self._deliver)
        cap = config.capacity
        self.pipeline: Pipeline[Work] = Pipeline(
            cap.init, cap.run, cap.postrun, cap.ready, self.stages, on_transition=self._report
        )
        self.proxy.on_pause(lambda paused: self.pipeline.pause() if paused else self.pipeline.resume())
        self.jobs: dict[str, Job[Work]] = {}
        registration = NodeRegistration(
            node_id=config.node_id,
            url=config.public_url,
            capacity=cap,
            heartbeat_s=config.heartbeat_s,
            token=self.control_token,
        )
        self.heartbeat = Heartbeat(self.rollout, registration, self.outbox, self._metrics)
        self._tasks: set[asyncio.Task[Any]] = set()
        self.gauges = NodeGauges(self._pools, self.outbox.count)
        self.app = Starlette(
            routes=NodeRoutes(self).routes(), lifespan=self._lifespan, exception_handlers={HTTPException: http_error}
        )

    @asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self.pipeline.start()
        beat = asyncio.create_task(self.heartbeat.run())
        yield
        beat.cancel()
        await self.pipeline.close()
        for t in list(self._tasks):
            await asyncio.wait([t], timeout=5)
        await self.rollout.close()
        await self.proxy.aclose()

    # --- what the routes ask ------------------------------------------------------------------
    def accept(self, req: DispatchRequest) -> bool:
        """The session joins the pipeline; False when it is already here (a dispatch sent again)."""
        if req.session_id in self.jobs:
            return False
        hide(req.task.secrets.values)  # this process's log lines never show them
        job = self.stages.job(req)
        self.jobs[req.session_id] = job
        self.pipeline.submit(job)
        return True

    def cancel(self, session_id: str) -> bool:
        """False when the session is unknown here, or already cleaning up."""
        return self.pipeline.cancel(session_id, "cancelled by the rollout server")

    # --- what the rollout server hears ----------------------------------------------------------
    def _pools(self) -> dict[str, int]:
        m = self.pipeline.metrics()
        return {
            "init_queue": m.init_queue,
            "init": m.init_inflight,
            "ready": m.ready,
            "run": m.run_inflight,
            "postrun_queue": m.postrun_queue,
            "postrun": m.postrun_inflight,
        }

    def _metrics(self) -> NodeMetrics:
        return self.pipeline.metrics().model_copy(update={"recording": self.proxy.recording})

    def _report(self, session_id: str, state: SessionState, cause: str | None) -> None:
        if state.terminal:  # a final state travels with its result
            self._ended(session_id)
        elif state is not SessionState.REGISTERED:
            self._spawn(self.rollout.report_state(session_id, state, self.config.node_id, STATE_REPORT))

    def _ended(self, session_id: str) -> None:
        """A session POST-RUN began for always gets a result. `_deliver` takes the job when POST-RUN delivers
        one; a job still here had a POST-RUN that raised or ran out of time, and the server gets why (masked)
        now instead of waiting out session_timeout_s. One that never started is the server's to re-queue."""
        job = self.jobs.pop(session_id, None)
        if job is not None and job.started:
            self._spawn(self._deliver(self.stages.undelivered(job)))

    async def _deliver(self, result: SessionResult) -> None:
        await self.outbox.keep(result)
        self.jobs.pop(result.session_id, None)
        await self.outbox.send(result)

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _sweep(root: Path, keep: set[str]) -> None:
    """Session folders left by a node that died: their sessions are lost (the server knows it once we
    register again), and their sandboxes died with the node (bubblewrap's --die-with-parent)."""
    for path in root.iterdir():
        if path.name not in keep and path.is_dir():
            log.warning("removing %s, left by an earlier run of this node", path)
            shutil.rmtree(path, ignore_errors=True)


def _reap(root: Path) -> None:
    """Sandboxes that outlive their node (a docker engine's containers), found by the node's folder and removed."""
    for kind in RUNTIMES:
        left = RUNTIMES[kind].reap(root)
        if left:
            log.warning("removed %d %s sandboxes left by an earlier run of this node: %s", len(left), kind, left)


def serve(config: GatewayConfig) -> None:
    """`polar serve-gateway`: one node (proxy + pipeline) in the foreground until interrupted."""
    node = GatewayNode(config.node, Proxy(config.proxy))
    try:
        print(
            f"polar gateway node {node.config.node_id} on {node.config.public_url}"
            f" -> rollout {config.node.rollout_url}, upstream {config.proxy.upstream.url}",
            flush=True,
        )
        run(node.app, config.proxy.host, config.proxy.port)
    finally:
        node.proxy.close()


class NodeThread(ServerThread):
    """A gateway node's server on a thread of this process, for tests and `polar up`."""

    def __init__(self, node: GatewayNode, host: str, port: int):
        super().__init__(node.app, host, port, "polar-node")

    def __enter__(self) -> NodeThread:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop(60)
