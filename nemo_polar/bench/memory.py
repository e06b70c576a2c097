"""`polar bench memory`: the proxy's resident memory over a long run of calls, shape by shape.

A proxy process runs in front of a fake upstream that answers with prompt ids for the whole history
(`fake_upstream --history`), as a token-returning server does. Each shape runs `calls` calls one after
another on a fresh proxy, the dialects taking turns and every other call streamed:
- `new_closed`: a new `prompt_kb` prompt each call, in a new session closed after it (a training run's
  new tasks);
- `new_open`: the same, the sessions left open: what they keep is bounded by the session cache
  (`limits.session_cache_bytes`, set to `cache_mb`);
- `growing`: sessions of `turns` calls, each sending its whole history again plus a turn of
  `turn_kb` (an agent session), closed at their end;
- `edited`: the same, with an earlier message rewritten or the history cut in half before most
  calls (compaction, a harness that edits its context): little to reuse from the last call.
The proxy's RSS is read every `calls / 20` calls. Per shape: RSS at the start, half-way, the end and
the peak, and the growth over the second half. Held (exit 1 when not): a closed shape grows less than
`GROWTH_MB` over its second half (memory follows what is open, not how many calls were made), and
the open shape stays within `OPEN_FACTOR` times the cache's bound above its start.

`servers` looks at the other long-lived processes the same way: a rollout server and a gateway node
running many sessions, a constant number of them open at a time.
"""

from __future__ import annotations

import asyncio
import os
import random
import tempfile
import time
from typing import Any

import aiohttp
import orjson

from ..proxy.serve import free_port
from .proxy import DIALECTS, children, dialect_call, rss_mb, spawn

SHAPES = ("new_closed", "new_open", "growing", "edited")
GROWTH_MB = 30.0
# the bound is on what the cache holds; the allocator keeps the holes that evictions leave (measured: 1.4x)
OPEN_FACTOR = 1.5
_SAMPLES = 20


def _text(rng: random.Random, size: int, tag: str) -> str:
    """`size` bytes of text, different for every call (nothing to reuse by accident)."""
    word = f"{tag}-{rng.randrange(10**9)} "
    return (word * (size // len(word) + 1))[:size]


def _calls(shape: str, calls: int, prompt_kb: int, turns: int, turn_kb: int, seed: int):
    """(session index, turns of the call, close the session after it) for each call of the shape."""
    rng = random.Random(seed)
    if shape in ("new_closed", "new_open"):
        for i in range(calls):
            yield i, [("user", _text(rng, prompt_kb << 10, f"task{i}"))], shape == "new_closed"
        return
    history: list[tuple[str, str]] = []
    session = 0
    for i in range(calls):
        turn = i % turns
        if turn == 0:
            session, history = i // turns, [("user", _text(rng, turn_kb << 10, f"task{i}"))]
        elif shape == "edited" and len(history) > 2 and rng.random() < 0.8:
            if rng.random() < 0.5:
                at = rng.randrange(0, len(history) - 1, 2)  # a user turn
                history[at] = ("user", _text(rng, turn_kb << 10, f"edit{i}"))
            else:
                history = history[: len(history) // 2 | 1]  # cut, still ending on a user turn
        yield session, list(history), turn == turns - 1 or i == calls - 1
        history += [("assistant", _text(rng, 256, f"answer{i}")), ("user", _text(rng, turn_kb << 10, f"result{i}"))]


async def _drive(url: str, shape: str, calls: int, pid: int, **sizes: int) -> dict[str, Any]:
    samples: list[tuple[int, float]] = [(0, rss_mb(pid))]
    every = max(1, calls // _SAMPLES)
    sent = 0
    keys: dict[int, tuple[str, str]] = {}
    t0 = time.monotonic()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as http:
        for n, (session, turns, close) in enumerate(_calls(shape, calls, **sizes), 1):
            if session not in keys:
                async with http.post(url + "/admin/sessions", json={}) as resp:
                    opened = await resp.json()
                keys[session] = (opened["session_id"], opened["api_key"])
            sid, key = keys[session]
            dialect = DIALECTS[n % len(DIALECTS)] if shape.startswith("new") else DIALECTS[session % len(DIALECTS)]
            path, body, headers = dialect_call(dialect, key, 16, stream=n % 2 == 0, turns=turns)
            raw = orjson.dumps(body)
            sent += len(raw)
            async with http.post(url + path, data=raw, headers=headers | {"content-type": "application/json"}) as resp:
                answer = await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"{shape}: HTTP {resp.status} from {dialect}: {answer[:300]!r}")
            if close:
                async with http.post(url + f"/admin/sessions/{sid}/close") as resp:
                    await resp.read()
                del keys[session]
            if n % every == 0 or n == calls:
                samples.append((n, rss_mb(pid)))
    return {"samples": samples, "sent": sent, "seconds": time.monotonic() - t0}


def _shape(
    shape: str, calls: int, cache_mb: int, prompt_kb: int, turns: int, turn_kb: int, seed: int
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="polar-memory-") as tmp, children(grace_s=10) as procs:
        fake, proxy = free_port(), free_port()
        url = lambda port: f"http://127.0.0.1:{port}"  # noqa: E731
        procs.append(
            spawn(["-m", "nemo_polar.bench.fake_upstream", "--port", str(fake), "--history"], url(fake) + "/health")
        )
        args = [f"port={proxy}", f"upstream.url={url(fake)}", f"store.path={tmp}/records.sqlite", "log_level=warning"]
        args.append(f"limits.session_cache_bytes={cache_mb << 20}")
        procs.append(spawn(["-m", "nemo_polar.cli", "proxy", *args], url(proxy) + "/health"))
        pid = procs[1].pid
        sizes = {"prompt_kb": prompt_kb, "turns": turns, "turn_kb": turn_kb, "seed": seed}
        seen = asyncio.run(_drive(url(proxy), shape, calls, pid, **sizes))
        peak = rss_mb(pid, "VmHWM")
        store_mb = round(os.path.getsize(f"{tmp}/records.sqlite") / 2**20, 1)
    samples = seen["samples"]
    start, end = samples[0][1], samples[-1][1]
    half = min(samples, key=lambda s: abs(s[0] - calls / 2))
    growth = round(end - half[1], 1)
    out = {
        "calls": calls,
        "sent_mb": round(seen["sent"] / 2**20, 1),
        "seconds": round(seen["seconds"], 1),
        "rss_mb": {"start": start, "half": half[1], "end": end, "peak": peak},
        "growth_second_half_mb": growth,
        "store_mb": store_mb,
        "samples": samples,
    }
    if shape == "new_open":
        out["cache_mb"] = cache_mb
        out["held"] = end - start <= OPEN_FACTOR * cache_mb
    else:
        out["held"] = growth < GROWTH_MB
    return out


def run(
    calls: int = 700,
    cache_mb: int = 256,
    prompt_kb: int = 1024,
    turns: int = 100,
    turn_kb: int = 4,
    seed: int = 0,
    shapes: tuple[str, ...] = SHAPES,
) -> dict[str, Any]:
    result: dict[str, Any] = {
        "shapes": {s: _shape(s, calls, cache_mb, prompt_kb, turns, turn_kb, seed) for s in shapes},
        "bars": {
            "growth_second_half_mb_below": GROWTH_MB,
            "open_rss_above_start_at_most": f"{OPEN_FACTOR} x cache_mb",
        },
        "dialects": list(DIALECTS),
        "cpus": os.cpu_count(),
    }
    result["held"] = all(s["held"] for s in result["shapes"].values())
    return result


SERVER_SHAPE = "sessions"


def servers(sessions: int = 800, group: int = 8, open_tasks: int = 4) -> dict[str, Any]:
    """The rollout server's and a gateway node's RSS over `sessions` sessions (`polar serve-rollout` and
    `polar serve-gateway`, each its own process, local sandboxes): tasks of `group` samples, each session
    one model call by the `shell` harness, with `open_tasks` tasks in flight at any time, so the open work
    is constant. Held: neither grows by `GROWTH_MB` or more over the second half of the sessions."""
    from ..harnesses.shell import CHECK_AGENT

    token = "bench-token"
    tasks = -(-sessions // group)
    with tempfile.TemporaryDirectory(prefix="polar-memory-") as tmp, children(grace_s=15) as procs:
        fake, rollout, node = free_port(), free_port(), free_port()
        url = lambda port: f"http://127.0.0.1:{port}"  # noqa: E731
        procs.append(spawn(["-m", "nemo_polar.bench.fake_upstream", "--port", str(fake)], url(fake) + "/health"))
        args = [f"port={rollout}", f"store.path={tmp}/rollout.sqlite", f"control_token={token}"]
        procs.append(spawn(["-m", "nemo_polar.cli", "serve-rollout", *args], url(rollout) + "/health"))
        args = [
            f"proxy.port={node}",
            f"proxy.upstream.url={url(fake)}",
            f"proxy.store.path={tmp}/node.sqlite",
            "proxy.log_level=warning",
            f"node.rollout_url={url(rollout)}",
            f"node.root={tmp}/node",
            f"node.control_token={token}",
            "node.heartbeat_s=0.5",
        ]
        procs.append(spawn(["-m", "nemo_polar.cli", "serve-gateway", *args], url(node) + "/health"))
        pids = {"rollout_server": procs[1].pid, "gateway_node": procs[2].pid}
        spec = {"instruction": "say hello", "num_samples": group, "harness": {"name": "shell", "command": CHECK_AGENT}}
        seen = asyncio.run(_sessions(url(rollout), token, spec, tasks, open_tasks, pids))
        peaks = {name: rss_mb(pid, "VmHWM") for name, pid in pids.items()}
    out: dict[str, Any] = {
        "sessions": seen["done"],
        "completed": seen["completed"],
        "group": group,
        "open_sessions": group * open_tasks,
        "seconds": round(seen["seconds"], 1),
    }
    for name in pids:
        samples = [(n, rss[name]) for n, rss in seen["samples"]]
        half = min(samples, key=lambda s: abs(s[0] - seen["done"] / 2))
        growth = round(samples[-1][1] - half[1], 1)
        out[name] = {
            "rss_mb": {"start": samples[0][1], "half": half[1], "end": samples[-1][1], "peak": peaks[name]},
            "growth_second_half_mb": growth,
            "held": growth < GROWTH_MB,
            "samples": samples,
        }
    out["held"] = all(out[name]["held"] for name in pids) and seen["completed"] == seen["done"]
    return out


async def _sessions(
    rollout: str, token: str, spec: dict, tasks: int, open_tasks: int, pids: dict[str, int]
) -> dict[str, Any]:
    headers = {"x-polar-control-token": token}
    every = max(1, tasks * spec["num_samples"] // _SAMPLES)
    samples: list[tuple[int, dict[str, float]]] = []
    done = completed = 0
    pending = list(range(tasks))
    t0 = time.monotonic()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        while True:  # the node registers on its own, a moment after it listens
            async with http.get(rollout + "/nodes", headers=headers) as resp:
                if any(n["healthy"] for n in (await resp.json())["nodes"]):
                    break
            await asyncio.sleep(0.2)
        samples.append((0, {name: rss_mb(pid) for name, pid in pids.items()}))
        running: set[str] = set()
        while pending or running:
            while pending and len(running) < open_tasks:
                task_id = f"t{pending.pop(0)}"
                async with http.post(rollout + "/tasks", json=spec | {"task_id": task_id}, headers=headers) as resp:
                    if resp.status != 201:
                        raise RuntimeError(f"submit: HTTP {resp.status}: {(await resp.read())[:300]!r}")
                running.add(task_id)
            await asyncio.sleep(0.2)
            for task_id in list(running):
                async with http.get(f"{rollout}/tasks/{task_id}", headers=headers) as resp:
                    body = await resp.json()
                states = [s["state"] for s in body["sessions"]]
                if all(s in ("completed", "error", "timeout", "cancelled") for s in states):
                    running.discard(task_id)
                    before, done = done, done + len(states)
                    completed += states.count("completed")
                    if done // every > before // every or not (pending or running):
                        samples.append((done, {name: rss_mb(pid) for name, pid in pids.items()}))
    return {"samples": samples, "done": done, "completed": completed, "seconds": time.monotonic() - t0}
