"""The dispatch loop outlives what goes wrong around one dispatch: a dead dispatcher strands every waiting session."""

from __future__ import annotations

import asyncio

from nemo_polar.contracts import DispatchRequest, NodeMetrics, NodeRegistration, TaskSpec
from nemo_polar.errors import ControlUnreachable
from nemo_polar.server.rollout.dispatcher import Dispatch, dispatch_loop
from nemo_polar.server.rollout.store import NodeRow


class Planner:
    """Two sessions to send; putting the first back in the queue fails (a bug)."""

    def __init__(self, node: NodeRow) -> None:
        task = TaskSpec(task_id="t", instruction="w", harness={"name": "shell", "command": "true"})
        self.todo = [Dispatch(node, DispatchRequest(session_id=s, task=task, callback_url="x"), 1) for s in "ab"]

    def next_dispatches(self, limit: int) -> list[Dispatch]:
        return [self.todo.pop(0)] if self.todo else []

    def dispatch_failed(self, session_id: str, cause: str = "") -> None:
        raise RuntimeError(f"could not re-queue {session_id}")


class Nodes:
    def __init__(self) -> None:
        self.sent: list[str] = []

    async def dispatch(self, node, request: DispatchRequest) -> None:
        self.sent.append(request.session_id)
        raise ControlUnreachable("no answer in time")


def test_the_dispatcher_goes_on_after_a_dispatch_it_could_not_put_back(caplog):
    registration = NodeRegistration(node_id="n1", url="http://127.0.0.1:1")
    node = NodeRow(registration=registration, metrics=NodeMetrics(), last_heartbeat=0.0, draining=False)
    nodes = Nodes()

    async def body() -> None:
        loop = asyncio.create_task(dispatch_loop(Planner(node), nodes, idle_s=0.01))
        await asyncio.sleep(0.3)
        assert not loop.done()
        loop.cancel()

    asyncio.run(body())
    assert nodes.sent == ["a", "b"]
    assert "putting a back in the queue failed" in caplog.text
