"""`polar bench load`: many harness sessions streaming at once through one proxy, for a while.

Each session is a harness: its own connection (opened by its first call, kept alive after), streamed
Chat Completions calls one after another against a fake upstream that paces its tokens like a busy
inference server. The proxy runs as its own process. Reported: calls answered, records in the store
and calls answered without one (`lost`), the latency of each session's first call (a new connection:
accept, then the call) against later calls on the open connection, the proxy's RSS at the start, the
end and its peak, and calls per second.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from typing import Any

import aiohttp
import orjson

from ..proxy.serve import free_port
from ..store import SqliteStore
from .proxy import _pct, children, rss_mb, spawn


async def _session(url: str, key: str, until: float, first: list[float], later: list[float], errors: list[str]) -> int:
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "load"}], "stream": True})
    headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    answered = 0
    # one connection per session, as one harness process holds: the first call opens it
    connector = aiohttp.TCPConnector(limit=1)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as http:
        while time.monotonic() < until:
            t0 = time.perf_counter()
            try:
                async with http.post(url + "/v1/chat/completions", data=body, headers=headers) as resp:
                    text = await resp.read()
            except (aiohttp.ClientError, TimeoutError) as exc:
                errors.append(repr(exc)[:200])
                continue
            if resp.status != 200 or not text.endswith(b"data: [DONE]\n\n"):
                errors.append(f"HTTP {resp.status}: {text[:200]!r}")
                continue
            (later if answered else first).append(time.perf_counter() - t0)
            answered += 1
    return answered


async def _drive(url: str, keys: list[str], seconds: float) -> dict[str, Any]:
    first: list[float] = []
    later: list[float] = []
    errors: list[str] = []
    until = time.monotonic() + seconds
    t0 = time.monotonic()
    answered = await asyncio.gather(*(_session(url, k, until, first, later, errors) for k in keys))
    return {"answered": answered, "first": first, "later": later, "errors": errors, "wall": time.monotonic() - t0}


def run(sessions: int = 512, seconds: float = 120.0, tokens: int = 16, token_delay_ms: float = 20.0) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="polar-load-") as tmp:  # the stores go with the run
        fake, proxy = free_port(), free_port()
        url = lambda port: f"http://127.0.0.1:{port}"  # noqa: E731
        store = f"{tmp}/records.sqlite"
        with children(grace_s=10) as procs:
            args = ["--port", str(fake), "--tokens", str(tokens), "--token-delay-ms", str(token_delay_ms)]
            procs.append(spawn(["-m", "nemo_polar.bench.fake_upstream", *args], url(fake) + "/health"))
            args = [f"port={proxy}", f"upstream.url={url(fake)}", f"store.path={store}", "log_level=warning"]
            procs.append(spawn(["-m", "nemo_polar.cli", "proxy", *args], url(proxy) + "/health"))
            pid = procs[1].pid
            keys, ids = [], []
            for _ in range(sessions):
                opened = _open(url(proxy))
                keys.append(opened["api_key"])
                ids.append(opened["session_id"])
            rss_start = rss_mb(pid)
            seen = asyncio.run(_drive(url(proxy), keys, seconds))
            rss_end, rss_peak = rss_mb(pid), rss_mb(pid, "VmHWM")
        kept = SqliteStore(store)
        try:
            ok = {sid: sum(r.status == "ok" for r in kept.records(sid)) for sid in ids}
            records = len(kept.records())
        finally:
            kept.close()
    lost = sum(max(0, n - ok[sid]) for sid, n in zip(ids, seen["answered"], strict=True))
    ms = lambda v: round(1000 * v, 1)  # noqa: E731
    calls = sum(seen["answered"])
    first, later = seen["first"] or [0.0], seen["later"] or [0.0]
    return {
        "sessions": sessions,
        "seconds": seconds,
        "calls": calls,
        "records": records,
        "lost": lost,
        "errors": len(seen["errors"]),
        "error_examples": seen["errors"][:3],
        "first_call_ms": {"p50": ms(_pct(first, 0.5)), "p99": ms(_pct(first, 0.99)), "max": ms(max(first))},
        "keep_alive_ms": {"p50": ms(_pct(later, 0.5)), "p99": ms(_pct(later, 0.99))},
        "first_p99_vs_keep_alive_p99": round(_pct(first, 0.99) / max(_pct(later, 0.99), 1e-9), 2),
        "rss_mb": {"start": rss_start, "end": rss_end, "peak": rss_peak},
        "calls_per_s": round(calls / seen["wall"], 1),
        "upstream_token_delay_ms": token_delay_ms,
        "tokens": tokens,
        "cpus": os.cpu_count(),
    }


def _open(proxy: str) -> dict[str, Any]:
    import urllib.request

    request = urllib.request.Request(proxy + "/admin/sessions", data=b"{}", method="POST")
    with urllib.request.urlopen(request, timeout=30) as resp:
        return orjson.loads(resp.read())
