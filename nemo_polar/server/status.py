"""`polar status`: what a running rollout server holds, as two tables (or JSON)."""

from __future__ import annotations

import asyncio

from rich.console import Console
from rich.table import Table

from .client import RolloutAPI


def fetch(url: str) -> dict:
    return asyncio.run(_fetch(url))


async def _fetch(url: str) -> dict:
    async with RolloutAPI(url, timeout_s=10) as api:
        tasks, nodes = await asyncio.gather(api.tasks(), api.nodes())
    return {"tasks": tasks, "nodes": nodes}


def render(status: dict, console: Console | None = None) -> None:
    console = console or Console(width=120)
    tasks = Table(title="tasks")
    for col in ("task", "status", "samples", "sessions by state"):
        tasks.add_column(col)
    for t in status["tasks"]:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(t["counts"].items()) if v)
        tasks.add_row(t["task_id"], t["status"], str(t["num_samples"]), counts)
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
