"""A gateway node's registration and heartbeat: it registers at start-up, then reports its stage
metrics every `heartbeat_s`; the outbox is sent first each time. A node whose heartbeats stop is a
lost node, so nothing stops them but the node's own shutdown."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from ...contracts import NodeMetrics, NodeRegistration
from ...errors import ControlError, ControlRefused
from ..client import RolloutAPI
from .outbox import Outbox

log = logging.getLogger("nemo_polar.gateway")


class Heartbeat:
    def __init__(
        self, rollout: RolloutAPI, registration: NodeRegistration, outbox: Outbox, metrics: Callable[[], NodeMetrics]
    ):
        self.rollout, self.registration, self.outbox, self.metrics = rollout, registration, outbox, metrics

    async def run(self) -> None:
        node_id, interval_s = self.registration.node_id, self.registration.heartbeat_s
        registered = False
        while True:
            try:
                # results first: registering tells the server that our earlier sessions are lost
                await self.outbox.flush()
                if not registered:
                    await self.rollout.register(self.registration)
                    registered = True
                else:
                    await self.rollout.heartbeat(node_id, self.metrics())
            except ControlRefused as exc:
                if exc.status_code == 404:  # the server forgot us: register again
                    registered = False
                log.warning("rollout server refused: %s", exc)
            except ControlError as exc:
                log.warning("rollout server unreachable: %s", exc)
            except Exception:  # noqa: BLE001 - a node whose heartbeats stop is a lost node: never let them
                log.exception("heartbeat failed; trying again in %.1fs", interval_s)
            await asyncio.sleep(interval_s)
