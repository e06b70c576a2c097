"""`polar status`: what a running rollout server holds, as tables (or JSON): its tasks with their
sessions' rollups summed, its gateway nodes, and with `--task ID` that task's sessions one by one."""

from __future__ import annotations

import asyncio

from rich.console import Console
from rich.table import Table

from ..rollup import COLUMNS, cells
from ..server.client import RolloutAPI


def fetch(url: str, task_id: str | None = None, token: str | None = None) -> dict:
    """What the server holds; `token`: its control token, when it has one (every read needs it)."""
    return asyncio.run(_fetch(url, task_id, token))


async def _fetch(url: str, task_id: str | None, token: str | None) -> dict:
    async with RolloutAPI(url, token, timeout_s=10) as api:
        tasks, nodes = await asyncio.gather(api.tasks(), api.nodes())
        one = await api.task(task_id) if task_id else None
    return {"tasks": tasks, "nodes": nodes} | ({"task": one} if one else {})


def render(status: dict, console: Console | None = None) -> None:
    console = console or Console(width=120)
    tasks = Table(title="tasks (calls and tokens: the finished sessions' rollups summed)")
    for col in (
        "task",
        "status",
        "samples",
        "sessions by state",
        "calls",
        "tokens in / out",
        "trained",
        "model s / tools s",
    ):
        tasks.add_column(col)
    for t in status["tasks"]:
        counts = "\n".join(f"{k} {v}" for k, v in sorted(t["counts"].items()) if v)  # one state a line: never cut
        r = t.get("rollup") or {}
        tasks.add_row(
            t["task_id"],
            t["status"],
            str(t["num_samples"]),
            counts,
            str(r.get("calls", "")),
            f"{r.get('prompt_tokens', 0):,} / {r.get('completion_tokens', 0):,}",
            f"{r.get('trained_tokens', 0):,}",
            f"{r.get('model_s', 0):.1f} / {r.get('tools_s', 0):.1f}",
        )
    nodes = Table(title="gateway nodes")
    for col in ("node", "healthy", "draining", "init", "ready", "run", "post-run"):
        nodes.add_column(col)
    for n in status["nodes"]:
        m = n["metrics"]
        nodes.add_row(
            n["node_id"],
            str(n["healthy"]),
            str(n["draining"]),
            f"{m['init_queue']}+{m['init_inflight']}",
            str(m["ready"]),
            str(m["run_inflight"]),
            f"{m['postrun_queue']}+{m['postrun_inflight']}",
        )
    console.print(tasks)
    console.print(nodes)
    if "task" in status:
        console.print(sessions_table(status["task"]))


def sessions_table(task: dict) -> Table:
    table = Table(title=f"sessions of {task['task_id']}")
    for col in ("session", "state", "reward", *COLUMNS):
        table.add_column(col)
    for s in task["sessions"]:
        result = s.get("result") or {}
        reward = "masked" if result.get("masked") else result.get("reward")
        table.add_row(s["session_id"], s["state"], "-" if reward is None else str(reward), *cells(s.get("result")))
    return table
