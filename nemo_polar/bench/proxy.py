"""`polar bench proxy`: what the proxy adds, measured against calling the upstream directly.

The bench starts a fake upstream and the proxy as child processes (as in production, the proxy is
its own process) and drives both from this process with the same client, side by side:
- latency: concurrency 1, the upstream answering at once, direct and proxied requests alternating
  so that drift hits both equally; added = proxied - direct, per percentile;
- throughput: concurrency 64, the upstream pacing its tokens like a busy inference server
  (`token_delay_ms` per token), requests per second proxied / direct.
Each is measured streaming and not. Only loopback is used.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any

import aiohttp
import orjson

from ..local.vllm_server import stop_group
from ..proxy.serve import free_port


def _spawn(args: list[str], health: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{args[1]} exited: {proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
        try:
            urllib.request.urlopen(health, timeout=1)
            return proc
        except OSError:
            time.sleep(0.1)
    stop_group(proc.pid)
    raise TimeoutError(f"{args} did not start")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Bench:
    def __init__(self, upstream: str, proxy: str, key: str, tokens: int):
        self.upstream, self.proxy, self.key, self.tokens = upstream, proxy, key, tokens

    def _target(self, via_proxy: bool, stream: bool) -> tuple[str, bytes, dict[str, str]]:
        body: dict[str, Any] = {
            "model": "m",
            "messages": [{"role": "user", "content": "bench"}],
            "max_tokens": self.tokens,
            "stream": stream,
        }
        if via_proxy:
            return (
                self.proxy + "/v1/chat/completions",
                orjson.dumps(body),
                {"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"},
            )
        body |= {"logprobs": True, "top_logprobs": 0, "return_token_ids": True}  # what the proxy would send
        return self.upstream + "/v1/chat/completions", orjson.dumps(body), {"Content-Type": "application/json"}

    async def one(self, http: aiohttp.ClientSession, via_proxy: bool, stream: bool) -> float:
        url, body, headers = self._target(via_proxy, stream)
        t0 = time.perf_counter()
        async with http.post(url, data=body, headers=headers) as resp:
            await resp.read()
            if resp.status != 200:
                raise RuntimeError(f"HTTP {resp.status} from {url}")
        return time.perf_counter() - t0

    async def latency(self, stream: bool, n: int) -> dict[str, float]:
        async with aiohttp.ClientSession() as http:
            for _ in range(20):  # warm both paths
                await self.one(http, True, stream)
                await self.one(http, False, stream)
            direct, proxied = [], []
            for _ in range(n):
                direct.append(await self.one(http, False, stream))
                proxied.append(await self.one(http, True, stream))
        ms = lambda v: round(v * 1000, 3)  # noqa: E731
        return {
            "direct_p50_ms": ms(_pct(direct, 0.5)),
            "proxied_p50_ms": ms(_pct(proxied, 0.5)),
            "p50_added_ms": ms(_pct(proxied, 0.5) - _pct(direct, 0.5)),
            "p99_added_ms": ms(_pct(proxied, 0.99) - _pct(direct, 0.99)),
            "mean_added_ms": ms(statistics.fmean(proxied) - statistics.fmean(direct)),
        }

    async def throughput(self, via_proxy: bool, stream: bool, concurrency: int, n: int) -> float:
        connector = aiohttp.TCPConnector(limit=concurrency)
        async with aiohttp.ClientSession(connector=connector) as http:
            await asyncio.gather(*(self.one(http, via_proxy, stream) for _ in range(concurrency)))  # warm-up
            remaining = n

            async def worker() -> None:
                nonlocal remaining
                while remaining > 0:
                    remaining -= 1
                    await self.one(http, via_proxy, stream)

            t0 = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            return n / (time.perf_counter() - t0)


def run(requests: int = 2000, tokens: int = 16, token_delay_ms: float = 0.0, concurrency: int = 64) -> dict[str, Any]:
    """Both scenarios; `token_delay_ms` paces the throughput upstream (0: 10 ms, a busy server)."""
    pacing = token_delay_ms or 10.0
    procs: list[subprocess.Popen] = []
    tmp = tempfile.mkdtemp(prefix="polar-bench-")
    try:
        fast_port, paced_port, proxy_port, paced_proxy_port = (free_port() for _ in range(4))
        env_py = ["-m", "nemo_polar.bench.fake_upstream"]
        procs.append(
            _spawn(
                [*env_py, "--port", str(fast_port), "--tokens", str(tokens)], f"http://127.0.0.1:{fast_port}/health"
            )
        )
        procs.append(
            _spawn(
                [*env_py, "--port", str(paced_port), "--tokens", str(tokens), "--token-delay-ms", str(pacing)],
                f"http://127.0.0.1:{paced_port}/health",
            )
        )
        out: dict[str, Any] = {
            "requests": requests,
            "tokens": tokens,
            "concurrency": [1, concurrency],
            "throughput_upstream_token_delay_ms": pacing,
            "cpus": os.cpu_count(),
            "scenarios": [],
        }
        for port, up_port, name in ((proxy_port, fast_port, "fast"), (paced_proxy_port, paced_port, "paced")):
            procs.append(
                _spawn(
                    [
                        "-m",
                        "nemo_polar.cli",
                        "proxy",
                        f"port={port}",
                        "log_level=warning",
                        f"upstream.url=http://127.0.0.1:{up_port}",
                        f"store.path={tmp}/{name}.sqlite",
                    ],
                    f"http://127.0.0.1:{port}/health",
                )
            )
        out["scenarios"] = asyncio.run(
            _measure(fast_port, paced_port, proxy_port, paced_proxy_port, tokens, requests, concurrency)
        )
    finally:
        for p in procs:
            stop_group(p.pid, grace_s=5)
    lat = [s for s in out["scenarios"] if s["kind"] == "latency"]
    thr = [s for s in out["scenarios"] if s["kind"] == "throughput"]
    out["p50_added_ms"] = max(s["p50_added_ms"] for s in lat)
    out["p99_added_ms"] = max(s["p99_added_ms"] for s in lat)
    out["throughput_ratio"] = min(s["throughput_ratio"] for s in thr)
    return out


async def _measure(fast: int, paced: int, proxy: int, paced_proxy: int, tokens: int, n: int, c: int) -> list[dict]:
    scenarios = []
    for stream in (False, True):
        key = await _session(proxy)
        bench = Bench(f"http://127.0.0.1:{fast}", f"http://127.0.0.1:{proxy}", key, tokens)
        lat = await bench.latency(stream, max(100, n // 4))
        scenarios.append({"kind": "latency", "stream": stream, "concurrency": 1} | lat)
        key = await _session(paced_proxy)
        bench = Bench(f"http://127.0.0.1:{paced}", f"http://127.0.0.1:{paced_proxy}", key, tokens)
        direct = await bench.throughput(False, stream, c, n)
        proxied = await bench.throughput(True, stream, c, n)
        scenarios.append(
            {
                "kind": "throughput",
                "stream": stream,
                "concurrency": c,
                "direct_rps": round(direct, 1),
                "proxied_rps": round(proxied, 1),
                "throughput_ratio": round(proxied / direct, 3),
            }
        )
    return scenarios


async def _session(proxy_port: int) -> str:
    async with aiohttp.ClientSession() as http:
        async with http.post(f"http://127.0.0.1:{proxy_port}/admin/sessions", json={}) as resp:
            return (await resp.json())["api_key"]
