"""`polar bench fuzz`: seeded mutated requests against the proxy's five model routes and the rollout
server's task route, and what must hold whatever they carry.

Seeds are requests shaped like real harnesses' (system prompts, tools with schemas, tool calls and
their results, multi-turn, streamed or not). Each request is a seed with one mutation: a value
replaced by one of another type (lists where objects go, objects where strings go, numbers, nulls,
JSON nested 50 to 1,000 deep, long strings), a key dropped or added, a list item repeated, or the bytes
cut, flipped or emptied. The proxy and the rollout server run as their own processes in front of a
fake upstream (`bench/fake_upstream.py`); calls go `concurrency` at a time, spread over sessions.

Judged on the answers and on the store afterwards:
- `unhandled_5xx`: a 500, or any 5xx whose body is not in the caller's error shape (an upstream
  failure comes back as a 502/504 in dialect, which is handled);
- `not_dialect_shaped`: an error whose body is not the caller's dialect's error shape (OpenAI's
  `{"error": {"message"}}`, Anthropic's `{"type": "error", "error": {...}}`, Gemini's
  `{"error": {"code", "message", "status"}}`; the rollout server's `{"error": {"status", "type", "message"}}`);
- `lost_records`: answers of 200 without an `ok` record in their session;
- `wrong_session`: records carrying another session's marker;
- `writer_alive`: the proxy's /health still says it records.
Reported too: the bytes sent to the proxy, and its RSS at the end and at its peak.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from ..proxy.serve import free_port
from ..store import SqliteStore
from .proxy import children, rss_mb, spawn

DEEP = "\x00deep\x00"  # stands for a value nested too deep for orjson to write: spliced in as text
TOKEN = "fuzz-token"


@dataclass(frozen=True)
class Route:
    name: str
    path: str
    key_header: str
    shape: str  # openai | anthropic | gemini


ROUTES = [
    Route("openai_chat", "/v1/chat/completions", "authorization", "openai"),
    Route("openai_responses", "/v1/responses", "authorization", "openai"),
    Route("anthropic", "/v1/messages", "x-api-key", "anthropic"),
    Route("gemini", "/v1beta/models/m:generateContent", "x-goog-api-key", "gemini"),
    Route("gemini_stream", "/v1beta/models/m:streamGenerateContent?alt=sse", "x-goog-api-key", "gemini"),
]

_SCHEMA = {
    "type": "object",
    "properties": {"command": {"type": "string", "description": "shell"}, "n": {"type": "array", "items": {}}},
    "required": ["command"],
}


def seeds(route: str, marker: str, context: str = "") -> list[dict[str, Any]]:
    """Bodies shaped like real harnesses' requests, each carrying `marker` in its first user text, followed by
    `context` (what a harness puts there: the files it read, a long tool output)."""
    task = f"{marker} fix the failing test{context}"
    if route == "openai_chat":
        tool = {"type": "function", "function": {"name": "bash", "description": "run", "parameters": _SCHEMA}}
        turn = [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": task},
            {"role": "assistant", "content": None, "tool_calls": [_chat_call()]},
            {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "ok"}]},
        ]
        return [
            {"model": "m", "messages": turn[:2], "max_tokens": 8, "stream": False},
            {"model": "m", "messages": turn, "tools": [tool], "tool_choice": "auto", "max_tokens": 8, "stream": True},
            {"model": "m", "messages": turn[1:2], "stream": True, "stream_options": {"include_usage": True}},
        ]
    if route == "openai_responses":
        tool = {"type": "function", "name": "bash", "parameters": _SCHEMA, "strict": False}
        items = [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "be brief"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": task}]},
            {"type": "function_call", "call_id": "c1", "name": "bash", "arguments": '{"command": "ls"}'},
            {"type": "function_call_output", "call_id": "c1", "output": "a.py"},
        ]
        return [
            {"model": "m", "input": items[:2], "max_output_tokens": 8, "stream": False, "store": False},
            {"model": "m", "instructions": "agent", "input": items, "tools": [tool], "stream": True},
        ]
    if route == "anthropic":
        tool = {"name": "bash", "description": "run", "input_schema": _SCHEMA}
        turn = [
            {"role": "user", "content": [{"type": "text", "text": task, "cache_control": {"type": "ephemeral"}}]},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "ls"}}],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.py"}]},
        ]
        return [
            {"model": "m", "max_tokens": 8, "system": [{"type": "text", "text": "agent"}], "messages": turn[:1]},
            {"model": "m", "max_tokens": 8, "messages": turn, "tools": [tool], "stream": True},
        ]
    tool = {"functionDeclarations": [{"name": "bash", "description": "run", "parameters": _SCHEMA}]}
    contents = [
        {"role": "user", "parts": [{"text": task}]},
        {"role": "model", "parts": [{"functionCall": {"name": "bash", "args": {"command": "ls"}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "bash", "response": {"output": "a.py"}}}]},
    ]
    return [
        {"contents": contents[:1], "generationConfig": {"maxOutputTokens": 8}},
        {"systemInstruction": {"parts": [{"text": "agent"}]}, "contents": contents, "tools": [tool]},
    ]


def _chat_call() -> dict[str, Any]:
    return {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}


def task_seed(i: int) -> dict[str, Any]:
    return {
        "task_id": f"fuzz-{i}",
        "instruction": "fix it",
        "num_samples": 1,
        "harness": {"name": "shell", "command": "true"},
        "runtime": {"kind": "local", "network": "none"},
        "evaluator": {"kind": "session_completed"},
        "fields": {"repo": "r", "tests": ["a", "b"]},
    }


# --- mutation ---------------------------------------------------------------------------------
def _weird(rng: random.Random) -> Any:
    return rng.choice(
        [
            None,
            True,
            0,
            -1,
            2**63,
            1e308,
            "",
            "x" * rng.choice([1, 1000, 100_000]),
            "\u0000\ud7ff\U0001f600",
            [],
            {},
            [[]],
            {"type": []},
            {"type": {}},
            {"function": "x"},
            [{"type": None}],
            DEEP,
        ]
    )


def _paths(node: Any, path: tuple = ()) -> list[tuple]:
    out = [path]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*path, i))
    return out


def _parent(root: Any, path: tuple) -> Any:
    for part in path[:-1]:
        root = root[part]
    return root


def mutate(body: dict[str, Any], rng: random.Random) -> bytes:
    """One mutation of `body` (a deep copy is changed), as the bytes to send."""
    body = json.loads(json.dumps(body))
    kind = rng.random()
    if kind < 0.08:  # the bytes themselves
        raw = orjson.dumps(body)
        return rng.choice([raw[: rng.randrange(len(raw))], raw.replace(b"{", b"[", 1), b"", b"null", b"[]"])
    path = rng.choice([p for p in _paths(body) if p])
    parent, last = _parent(body, path), path[-1]
    if kind < 0.7:
        parent[last] = _weird(rng)
    elif kind < 0.8 and isinstance(parent, dict):
        del parent[last]
    elif kind < 0.9 and isinstance(parent, list):
        parent.insert(last, parent[last])
    else:
        target = parent[last] if isinstance(parent[last], dict) else parent
        if isinstance(target, dict):
            target[rng.choice(["type", "role", "content", "x_unknown", "tools"])] = _weird(rng)
    raw = orjson.dumps(body)
    depth = rng.choice([50, 300, 1000])
    return raw.replace(orjson.dumps(DEEP), ("[" * depth + "1" + "]" * depth).encode())


# --- judging ----------------------------------------------------------------------------------
def dialect_shaped(shape: str, body: Any) -> bool:
    if not isinstance(body, dict):
        return False
    if shape == "anthropic":
        err = body.get("error")
        return body.get("type") == "error" and isinstance(err, dict) and isinstance(err.get("message"), str)
    err = body.get("error")
    if not isinstance(err, dict) or not isinstance(err.get("message"), str):
        return False
    if shape == "gemini":
        return isinstance(err.get("code"), int) and isinstance(err.get("status"), str)
    if shape == "control":
        return isinstance(err.get("status"), int) and isinstance(err.get("type"), str)
    return True


@dataclass
class Tally:
    requests: int = 0
    unhandled_5xx: int = 0
    not_dialect_shaped: int = 0
    statuses: Counter | None = None
    examples: list[dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        self.statuses, self.examples = Counter(), []

    def judge(self, route: str, shape: str, status: int, text: bytes, raw: bytes) -> None:
        self.requests += 1
        assert self.statuses is not None and self.examples is not None
        self.statuses[f"{route}:{status}"] += 1
        if status < 400:
            return
        try:
            body = orjson.loads(text)
        except orjson.JSONDecodeError:
            body = None
        shaped = dialect_shaped(shape, body)
        bad = not shaped or status == 500
        if status >= 500 and bad:
            self.unhandled_5xx += 1
        if not shaped:
            self.not_dialect_shaped += 1
        if bad and len(self.examples) < 5:
            self.examples.append(
                {
                    "route": route,
                    "status": status,
                    "answer": text[:300].decode(errors="replace"),
                    "request": raw[:300].decode(errors="replace"),
                }
            )


async def _send(http: aiohttp.ClientSession, url: str, raw: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    async with http.post(url, data=raw, headers=headers) as resp:
        return resp.status, await resp.read()


def _context(rng: random.Random, kb: int) -> str:
    """`kb` KB of text that differs from request to request (no history to reuse), or nothing."""
    if not kb:
        return ""
    line = f"\n{rng.randrange(10**12):012d} def f(x): return x  # "
    return (line * ((kb << 10) // len(line) + 1))[: kb << 10]


async def _fuzz_proxy(
    url: str, per_route: int, seed: int, concurrency: int, tally: Tally, context_kb: int = 0, timeout_s: float = 60.0
) -> dict[str, Any]:
    rng = random.Random(seed)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as http:
        sessions = []
        for i in range(8):
            async with http.post(url + "/admin/sessions", json={}, headers={"x-polar-control-token": TOKEN}) as r:
                opened = await r.json()
            sessions.append((f"marker-{i}-{rng.randrange(10**9)}", opened["session_id"], opened["api_key"]))
        jobs = [(route, rng.choice(sessions), rng.randrange(2**32)) for route in ROUTES for _ in range(per_route)]
        answered: Counter = Counter()
        queue = list(reversed(jobs))
        sent = 0

        async def worker() -> None:
            nonlocal sent
            while queue:
                route, (marker, sid, key), job_seed = queue.pop()
                job = random.Random(job_seed)  # each request made as it is sent: the same whatever the order
                raw = mutate(job.choice(seeds(route.name, marker, _context(job, context_kb))), job)
                sent += len(raw)
                value = f"Bearer {key}" if route.key_header == "authorization" else key
                headers = {route.key_header: value, "content-type": "application/json"}
                if route.name == "anthropic":
                    headers["anthropic-version"] = "2023-06-01"
                try:
                    status, text = await _send(http, url + route.path, raw, headers)
                except (aiohttp.ClientError, TimeoutError) as exc:  # dropped, or no answer in 60 s: a failure too
                    status, text = 599, repr(exc).encode()
                tally.judge(route.name, route.shape, status, text, raw)
                if status == 200:
                    answered[sid] += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        try:
            async with http.get(url + "/health", timeout=aiohttp.ClientTimeout(total=10)) as r:
                health = await r.json()
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            health = {"error": repr(exc)}  # a proxy that cannot say it records is not recording
    return {"sessions": sessions, "answered": answered, "health": health, "sent": sent}


async def _fuzz_rollout(url: str, n: int, seed: int, concurrency: int, tally: Tally) -> None:
    rng = random.Random(seed + 1)
    headers = {"x-polar-control-token": TOKEN, "content-type": "application/json"}
    jobs = [("POST", "/tasks", mutate(task_seed(i), rng)) for i in range(n)]
    jobs += [("POST", "/admin/inference/pause?timeout_seconds=abc", b""), ("GET", "/tasks/a%2Fb", b"")]
    queue = list(reversed(jobs))
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:

        async def worker() -> None:
            while queue:
                method, path, raw = queue.pop()
                try:
                    async with http.request(method, url + path, data=raw, headers=headers) as resp:
                        status, text = resp.status, await resp.read()
                except (aiohttp.ClientError, TimeoutError) as exc:
                    status, text = 599, repr(exc).encode()
                tally.judge("rollout", "control", status, text, raw)

        await asyncio.gather(*(worker() for _ in range(concurrency)))


def run(
    per_route: int = 10_000,
    seed: int = 0,
    concurrency: int = 16,
    rollout_requests: int | None = None,
    context_kb: int = 0,
) -> dict[str, Any]:
    """Every route fuzzed `per_route` times (the rollout server's task route too, or `rollout_requests`);
    `context_kb`: each model request carries that much context of its own."""
    with tempfile.TemporaryDirectory(prefix="polar-fuzz-") as tmp:  # the stores go with the run
        fake, proxy, rollout = (free_port() for _ in range(3))
        url = lambda port: f"http://127.0.0.1:{port}"  # noqa: E731
        t0 = time.monotonic()
        with children() as procs:
            procs.append(spawn(["-m", "nemo_polar.bench.fake_upstream", "--port", str(fake)], url(fake) + "/health"))
            store = f"{tmp}/records.sqlite"
            args = [f"port={proxy}", f"upstream.url={url(fake)}", f"store.path={store}", f"control_token={TOKEN}"]
            procs.append(spawn(["-m", "nemo_polar.cli", "proxy", *args, "log_level=error"], url(proxy) + "/health"))
            args = [f"port={rollout}", f"store.path={tmp}/rollout.sqlite", f"control_token={TOKEN}", "dispatch=false"]
            procs.append(spawn(["-m", "nemo_polar.cli", "serve-rollout", *args], url(rollout) + "/health"))
            tally = Tally()
            seen = asyncio.run(_fuzz_proxy(url(proxy), per_route, seed, concurrency, tally, context_kb))
            rss = {"end": rss_mb(procs[1].pid), "peak": rss_mb(procs[1].pid, "VmHWM")}  # the proxy's
            asyncio.run(_fuzz_rollout(url(rollout), rollout_requests or per_route, seed, concurrency, tally))
        kept = SqliteStore(store)
        lost = wrong = 0
        try:
            markers = {marker: sid for marker, sid, _ in seen["sessions"]}
            for _, sid, _ in seen["sessions"]:
                records = kept.records(sid)
                lost += max(0, seen["answered"][sid] - sum(r.status == "ok" for r in records))
                for r in records:
                    text = orjson.dumps(r.native_request).decode()
                    wrong += any(m in text for m, owner in markers.items() if owner != sid)
        finally:
            kept.close()
    return {
        "requests": tally.requests,
        "per_route": per_route,
        "seed": seed,
        "context_kb": context_kb,
        "unhandled_5xx": tally.unhandled_5xx,
        "not_dialect_shaped": tally.not_dialect_shaped,
        "lost_records": lost,
        "wrong_session": wrong,
        "writer_alive": bool(seen["health"].get("recording", {}).get("ok")),
        "answered": sum(seen["answered"].values()),
        "sent_mb": round(seen["sent"] / 2**20, 1),
        "proxy_rss_mb": rss,
        "statuses": dict(sorted(tally.statuses.items())),
        "examples": tally.examples,
        "seconds": round(time.monotonic() - t0, 1),
        "cpus": os.cpu_count(),
    }
