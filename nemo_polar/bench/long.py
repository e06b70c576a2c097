"""`polar bench long`: one agent session at real length, the whole history sent on every call.

A harness re-sends its history each call: here a system prompt, a task, then per turn the assistant's
tool call and a 2 KB tool result (slices of this Python's standard library: code, as an agent reads it).
The fake upstream (`--history`) answers each turn's tool call with prompt ids for the whole history,
one made-up id per 16 bytes (`fake`) or the tiny model's tokenizer (`tokenizer`), so each prompt extends
the previous call's prompt + sample as a real server's does.

`sessions` identical sessions run side by side, each turn's calls sent straight to the upstream
(`direct`), through the bare relay (`bare`, `bench/bare.py`) and through the proxy, the arms' order
turning each call so that drift hits all alike. Reported per id mode:
- the store's bytes per session at each of `turns` (the WAL checkpointed into the file first), their
  ratio to that turn's request bytes, and the growth from the second-longest to the longest session;
- added p50 latency (arm - direct) over the first and the last `window` turns, the proxy's against
  the bare relay's, and each hop's CPU per call over the same turns;
- the time and peak memory to build the longest session's traces (`prefix_tree`, read from the store
  and written as JSONL, as `polar traces` does), in a process of its own.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from ..proxy.serve import free_port
from .fake_upstream import SERVED_MODEL
from .proxy import _pct, children, cpu_seconds, spawn

MODES = ("fake", "tokenizer")
ARMS = ("direct", "bare", "proxy")
_TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command in the repository and return its output.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    },
}
_RESULT_BYTES = 2048


def corpus() -> str:
    """Standard library sources, read in a fixed order: the text the tool results are cut from."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    names = ["argparse.py", "ast.py", "dataclasses.py", "functools.py", "inspect.py", "pathlib.py", "typing.py"]
    return "".join((stdlib / n).read_text() for n in names)


def opening(text: str) -> list[dict[str, Any]]:
    system = "You are a coding agent working in a repository.\n" + text[:4000]
    task = "Fix the failing test in tests/test_parser.py without changing its assertions."
    return [{"role": "system", "content": system}, {"role": "user", "content": task}]


def tool_result(text: str, turn: int, call_id: str) -> dict[str, Any]:
    start = (turn * 7919 * 13) % (len(text) - _RESULT_BYTES)
    return {"role": "tool", "tool_call_id": call_id, "content": text[start : start + _RESULT_BYTES]}


def store_bytes(path: Path) -> int:
    """The store's size on disk once its write-ahead log is folded into the file (what it keeps)."""
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


async def _call(http: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    async with http.post(url, data=body, headers=headers) as resp:
        raw = await resp.read()
        took = time.perf_counter() - t0
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status} from {url}: {raw[:300]!r}")
    return took, orjson.loads(raw)


async def _drive(
    urls: dict[str, str], pids: dict[str, int], store: Path, turns: list[int], sessions: int, window: int
) -> dict[str, Any]:
    text = corpus()
    json_header = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as http:
        keys = []
        for _ in range(sessions):
            async with http.post(urls["proxy"] + "/admin/sessions", json={}) as resp:
                keys.append((await resp.json())["api_key"])
        history = opening(text)
        last = max(turns)
        times: dict[str, list[float]] = {a: [] for a in ARMS}  # per turn, every session's calls
        first_times: dict[str, list[float]] = {a: [] for a in ARMS}
        cpu: dict[str, dict[str, float]] = {}
        sizes: dict[int, dict[str, Any]] = {}
        order = 0
        for turn in range(1, last + 1):
            body = orjson.dumps({"model": SERVED_MODEL, "messages": history, "tools": [_TOOL], "max_tokens": 512})
            if turn in (1, last - window + 1):
                started = {a: cpu_seconds(pids.get(a)) for a in ("bare", "proxy")}
            # untimed: the upstream encodes this turn's new messages once, before any arm is timed
            await _call(http, urls["direct"] + "/v1/chat/completions", body, json_header)
            answers = {}
            for s in range(sessions):
                order += 1
                for arm in ARMS[order % 3 :] + ARMS[: order % 3]:
                    headers = json_header | ({"Authorization": f"Bearer {keys[s]}"} if arm == "proxy" else {})
                    took, answer = await _call(http, urls[arm] + "/v1/chat/completions", body, headers)
                    answers[arm] = answer["choices"][0]["message"]
                    if turn <= window:
                        first_times[arm].append(took)
                    elif turn > last - window:
                        times[arm].append(took)
            if turn in (window, last):
                which = "first" if turn == window else "last"
                cpu[which] = {
                    a: round(1000 * (cpu_seconds(pids[a]) - started[a]) / (window * sessions), 3) for a in started
                }
            reply = answers["proxy"]  # the harness keeps what it was answered, as it was rendered
            called = lambda m: [(c["id"], c["function"]) for c in m["tool_calls"]]  # noqa: E731
            if called(reply) != called(answers["direct"]):
                raise RuntimeError(
                    f"turn {turn}: the proxy answered {reply} where the upstream said {answers['direct']}"
                )
            history = history + [reply, tool_result(text, turn, reply["tool_calls"][0]["id"])]
            if turn in turns:
                size = store_bytes(store)
                sizes[turn] = {
                    "request_bytes": len(body),
                    "store_bytes_per_session": size // sessions,
                    "ratio_to_request": round(size / sessions / len(body), 2),
                }
    return {"sizes": sizes, "latency": _latency(first_times, times), "cpu_ms_per_call": cpu}


def _latency(first: dict[str, list[float]], last: dict[str, list[float]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, times in (("first", first), ("last", last)):
        p50 = {a: _pct(v, 0.5) for a, v in times.items()}
        added = {a: p50[a] - p50["direct"] for a in ("bare", "proxy")}
        out[name] = {
            "p50_ms": {a: round(1000 * v, 3) for a, v in p50.items()},
            "p50_added_ms": {a: round(1000 * v, 3) for a, v in added.items()},
            "proxy_vs_bare": round(added["proxy"] / max(added["bare"], 1e-6), 2),
        }
    return out


def build_traces(store: str, session: str, out: str) -> dict[str, Any]:
    """In a process of its own (`python -m nemo_polar.bench.long STORE SESSION OUT`): what building one
    session's traces takes, as `polar traces` builds them."""
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    from ..store import SqliteStore
    from ..traces import build
    from ..traces.export import write_jsonl

    imported = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    records = SqliteStore(store, read_only=True).records(session)
    read = time.perf_counter()
    result = build(records, "prefix_tree")
    built = time.perf_counter()
    write_jsonl(result, Path(out), session_id=session)
    done = time.perf_counter()
    return {
        "records": len(records),
        "traces": result.stats.traces,
        "merged": result.stats.merged,
        "read_s": round(read - t0, 3),
        "build_s": round(built - read, 3),
        "write_s": round(done - built, 3),
        "seconds": round(done - t0, 3),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "rss_after_imports_mb": round(max(base, imported) / 1024, 1),
    }


def _run_mode(
    mode: str, turns: list[int], sessions: int, window: int, tokenizer: str | None, keep: str | None
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="polar-bench-long-") as tmp:
        store = Path(tmp) / "records.sqlite"
        with children() as procs:
            fake, bare, proxy = free_port(), free_port(), free_port()
            url = lambda port: f"http://127.0.0.1:{port}"  # noqa: E731
            fake_args = ["--port", str(fake), "--history"] + (
                ["--tokenizer", tokenizer] if mode == "tokenizer" else []
            )
            procs.append(spawn(["-m", "nemo_polar.bench.fake_upstream", *fake_args], url(fake) + "/health"))
            procs.append(
                spawn(
                    ["-m", "nemo_polar.bench.bare", "--port", str(bare), "--upstream", url(fake)],
                    url(bare) + "/health",
                )
            )
            proxy_args = [f"port={proxy}", "log_level=warning", f"upstream.url={url(fake)}", f"store.path={store}"]
            procs.append(spawn(["-m", "nemo_polar.cli", "proxy", *proxy_args], url(proxy) + "/health"))
            urls = {"direct": url(fake), "bare": url(bare), "proxy": url(proxy)}
            pids = {"bare": procs[1].pid, "proxy": procs[2].pid}
            t0 = time.monotonic()
            result = asyncio.run(_drive(urls, pids, store, turns, sessions, window))
            result["drive_s"] = round(time.monotonic() - t0, 1)
        with sqlite3.connect(store) as conn:
            session = conn.execute("SELECT session_id FROM completions ORDER BY rowid LIMIT 1").fetchone()[0]
        out = subprocess.run(
            [sys.executable, "-m", "nemo_polar.bench.long", str(store), session, str(Path(tmp) / "traces.jsonl")],
            capture_output=True,
            text=True,
            check=True,
        )
        result["traces"] = json.loads(out.stdout)
        if keep is not None:  # the store, to read or `polar view` after the run
            Path(keep).mkdir(parents=True, exist_ok=True)
            shutil.copy(store, Path(keep) / f"{mode}.sqlite")
    sizes = result["sizes"]
    longest, before = sorted(sizes)[-1], sorted(sizes)[-2] if len(sizes) > 1 else None
    if before is not None:
        result["growth"] = {
            "turns": [before, longest],
            "store_bytes": round(
                sizes[longest]["store_bytes_per_session"] / sizes[before]["store_bytes_per_session"], 2
            ),
            "request_bytes": round(sizes[longest]["request_bytes"] / sizes[before]["request_bytes"], 2),
        }
    return result


def run(
    turns: list[int] | None = None,
    sessions: int = 3,
    window: int = 20,
    modes: tuple[str, ...] = MODES,
    tokenizer: str | None = None,
    keep: str | None = None,
) -> dict[str, Any]:
    turns = sorted(turns or [50, 100, 200])
    if max(turns) < 2 * window:
        raise ValueError(f"the longest session ({max(turns)} turns) must be at least twice the window ({window})")
    if "tokenizer" in modes and tokenizer is None:
        raise ValueError("the tokenizer mode needs a tokenizer folder (the tiny model's: .deps/models/tiny)")
    out: dict[str, Any] = {"turns": turns, "sessions": sessions, "window": window, "cpus": os.cpu_count()}
    for mode in modes:
        out[mode] = _run_mode(mode, turns, sessions, window, tokenizer, keep)
    return out


if __name__ == "__main__":
    print(json.dumps(build_traces(*sys.argv[1:4])))
