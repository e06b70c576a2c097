"""Which gateway node gets the next session: pure functions over node rows, easy to test.

A node is healthy while its heartbeats arrive (within 10 intervals), it is not draining and its proxy
records calls. Among
healthy nodes with free admission, the one with the least run pressure wins, then post-run, then
init pressure: RUN slots are the scarce, GPU-bound stage, so a session goes where the agent will
start soonest. Reservations count sessions dispatched since the node's last heartbeat, which its
metrics do not show yet.

A lost node's sessions (see `lost_plan`): a session whose agent never started running (still
registered-with-node, initializing or ready) is re-queued as registered, since no model call was
made for it and running it elsewhere loses nothing. A session that had started running ends in
`error` with cause "node lost" and is masked: its calls cannot be recovered faithfully.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ...states import SessionState
from .store import NodeRow, SessionRow

# missed heartbeats before a node is lost: a busy node must not lose its sessions. Five was too few: a node proxying 48
# sessions' calls on a loaded 2-core machine went 10 s between beats, and its running sessions were failed
STALE_FACTOR = 10.0
NODE_LOST = "node lost"
_UNSTARTED = (SessionState.REGISTERED, SessionState.INITIALIZING, SessionState.READY)


def alive(node: NodeRow, now: float) -> bool:
    """Heartbeats still arriving (draining or not): its sessions are not lost."""
    return now - node.last_heartbeat <= STALE_FACTOR * node.registration.heartbeat_s


def healthy(node: NodeRow, now: float) -> bool:
    return alive(node, now) and not node.draining and node.metrics.recording


def admission_limit(node: NodeRow) -> int:
    cap = node.registration.capacity
    return cap.init + cap.ready + cap.run + cap.postrun


def load(node: NodeRow, reserved: int = 0) -> int:
    m = node.metrics
    return m.init_queue + m.init_inflight + m.ready + m.run_inflight + m.postrun_queue + m.postrun_inflight + reserved


def free(node: NodeRow, reserved: int = 0) -> int:
    return admission_limit(node) - load(node, reserved)


def score(node: NodeRow, reserved: int = 0) -> tuple[float, float, float, str]:
    cap, m = node.registration.capacity, node.metrics
    run = m.run_inflight / cap.run
    post = (m.postrun_queue + m.postrun_inflight) / cap.postrun
    init = (m.init_queue + m.init_inflight + reserved) / cap.init
    return (run, post, init, node.id)  # the id last: a deterministic tie-break


def pick(nodes: Iterable[NodeRow], reservations: Mapping[str, int], now: float) -> NodeRow | None:
    """The least loaded healthy node with room, or None when every node is full, stale or draining."""
    candidates = [n for n in nodes if healthy(n, now) and free(n, reservations.get(n.id, 0)) > 0]
    return min(candidates, key=lambda n: score(n, reservations.get(n.id, 0)), default=None)


def stale(nodes: Iterable[NodeRow], now: float) -> list[NodeRow]:
    return [n for n in nodes if not alive(n, now)]


def lost_plan(sessions: Iterable[SessionRow]) -> tuple[list[SessionRow], list[SessionRow]]:
    """A lost node's live sessions split into (re-queue, fail with NODE_LOST)."""
    requeue, fail = [], []
    for s in sessions:
        if s.state.terminal:
            continue
        (requeue if s.state in _UNSTARTED else fail).append(s)
    return requeue, fail
