"""`polar bench proxy`: what the proxy adds, against calling the upstream directly and against a bare
pass-through (`bench/bare.py`: aiohttp relaying bytes, the floor any Python hop has on this machine).

Fake upstreams, the bare relay and the proxy run as child processes (as in production, the proxy is
its own process); this process drives them all with one client, side by side. Arms: `direct`,
`bare`, and the proxy in each dialect (the harness's side of the call differs, the upstream call is
the same Chat Completions stream).
- latency: concurrency 1, an instant upstream, the arms in turn so that drift hits all alike (each
  timed call after an untimed one on its arm); added = arm - direct, per percentile;
- throughput: `concurrency` calls in flight on the instant upstream, so every hop is CPU-bound and
  requests per second say what each spends per call; arms take turns in timed windows, and a ratio
  between arms is the median of the rounds';
- paced: 64 in flight, the upstream pacing its tokens like a busy inference server: the proxy must
  not slow what the upstream can serve (direct vs the proxy's Chat Completions).
Each streamed and not. `*_vs_bare` figures are ratios to the bare relay's. A second proxy with
`store.durable=false` (an answer's last byte does not wait for its record's commit) runs as one more
Chat Completions arm, `UNDURABLE`: `durable_cost` is what that guarantee costs per call.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from ..chat import ChatRequest, Message
from ..proxy.backends.vllm import VLLMBackend
from ..proxy.serve import free_port
from ..sandbox import stop_group
from .fake_upstream import SERVED_MODEL

DIALECTS = ("openai_chat", "openai_responses", "anthropic", "gemini")
UNDURABLE = "openai_chat_undurable"
_PROMPT = "bench"
_TICKS = os.sysconf("SC_CLK_TCK")
_BLOCK, _UNTIMED = 10, 2  # latency: calls in a row on one arm, and how many of the first are not timed


def spawn(args: list[str], health: str) -> subprocess.Popen:
    """`python ARGS` in its own process group, once `health` answers (its stderr in the error if it exits).
    Its stderr goes to a file, never a pipe: a pipe nobody reads fills, and the server blocks on a log line."""
    err = tempfile.TemporaryFile()
    proc = subprocess.Popen([sys.executable, *args], stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err.seek(0)
            raise RuntimeError(f"{args[1]} exited: {err.read().decode(errors='replace')[-2000:]}")
        try:
            urllib.request.urlopen(health, timeout=1)
            return proc
        except OSError:
            time.sleep(0.1)
    stop_group(proc)
    raise TimeoutError(f"{args} did not start")


@contextlib.contextmanager
def children(grace_s: float = 5.0) -> Iterator[list[subprocess.Popen]]:
    """A list for the processes a run `spawn`s; each one's group is stopped on leaving, whatever happened."""
    procs: list[subprocess.Popen] = []
    try:
        yield procs
    finally:
        for p in procs:
            stop_group(p, grace_s=grace_s)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass(frozen=True)
class Hop:
    """A process between the client and the upstream."""

    url: str
    pid: int


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """A process's resident memory now (`VmRSS`) or at its peak (`VmHWM`), in MB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU time a process (all its threads) has used so far; 0 for no process."""
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()  # the name, in parentheses, may hold spaces
    return (int(fields[11]) + int(fields[12])) / _TICKS


@dataclass(frozen=True)
class Arm:
    """One way of making the same model call."""

    name: str
    url: str
    body: bytes
    headers: dict[str, str]
    pid: int | None = None  # the hop in between (bare relay or proxy), whose CPU time is counted


def upstream_body(tokens: int, stream: bool) -> bytes:
    """Exactly what the proxy sends upstream for the bench's Chat Completions call."""
    request = ChatRequest(model="m", messages=[Message("user", _PROMPT)], max_tokens=tokens, stream=stream)
    return orjson.dumps(VLLMBackend().build_body(request, None, SERVED_MODEL))


def dialect_call(
    dialect: str, key: str, tokens: int, stream: bool, turns: list[tuple[str, str]] | None = None
) -> tuple[str, dict[str, Any], dict[str, str]]:
    """(path, body, headers) of a call in a harness's dialect: a history of (role, text) turns, `user` and
    `assistant` in turn (a minimal prompt by default)."""
    turns = turns or [("user", _PROMPT)]
    chat = [{"role": role, "content": text} for role, text in turns]
    bearer = {"Authorization": f"Bearer {key}"}
    if dialect == "openai_chat":
        return "/v1/chat/completions", {"model": "m", "messages": chat, "max_tokens": tokens, "stream": stream}, bearer
    if dialect == "openai_responses":
        return "/v1/responses", {"model": "m", "input": chat, "max_output_tokens": tokens, "stream": stream}, bearer
    if dialect == "anthropic":
        body = {"model": "m", "messages": chat, "max_tokens": tokens, "stream": stream}
        return "/v1/messages", body, {"x-api-key": key, "anthropic-version": "2023-06-01"}
    if dialect == "gemini":
        path = "/v1beta/models/m:" + ("streamGenerateContent?alt=sse" if stream else "generateContent")
        contents = [
            {"role": "model" if role == "assistant" else role, "parts": [{"text": text}]} for role, text in turns
        ]
        return path, {"contents": contents, "generationConfig": {"maxOutputTokens": tokens}}, {"x-goog-api-key": key}
    raise ValueError(f"unknown dialect {dialect}")


def arms(
    upstream: str, bare: Hop | None, proxy: Hop, key: str, tokens: int, stream: bool, dialects=DIALECTS
) -> list[Arm]:
    json = {"Content-Type": "application/json"}
    body = upstream_body(tokens, stream)
    out = [Arm("direct", upstream + "/v1/chat/completions", body, json)]
    if bare is not None:
        out.append(Arm("bare", bare.url + "/v1/chat/completions", body, json, bare.pid))
    for dialect in dialects:
        path, native, headers = dialect_call(dialect, key, tokens, stream)
        out.append(Arm(dialect, proxy.url + path, orjson.dumps(native), json | headers, proxy.pid))
    return out


async def call(http: aiohttp.ClientSession, arm: Arm) -> float:
    t0 = time.perf_counter()
    async with http.post(arm.url, data=arm.body, headers=arm.headers) as resp:
        await resp.read()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status} from {arm.name} ({arm.url})")
    return time.perf_counter() - t0


async def latency(arms: list[Arm], n: int) -> dict[str, Any]:
    """Concurrency 1; percentiles per arm, added = arm - direct. The arms take turns in blocks of `_BLOCK`
    calls in a row, the first `_UNTIMED` not timed, the order turned by one at every turn, until each has
    `n` timed calls: every hop is timed while it is serving calls, as a busy one is, and drift hits all
    arms alike. Timed one call at a time after one untimed call, the proxy's dialect that came right after
    the bare relay paid for waking the process up (docs/benchmarks.md)."""
    times: dict[str, list[float]] = {a.name: [] for a in arms}
    order = list(arms)
    async with aiohttp.ClientSession() as http:
        for _ in range(20):  # warm every path
            for arm in arms:
                await call(http, arm)
        for _ in range(math.ceil(n / (_BLOCK - _UNTIMED))):  # n timed calls per arm, or a few more
            for arm in order:
                for i in range(_BLOCK):
                    took = await call(http, arm)
                    if i >= _UNTIMED:
                        times[arm.name].append(took)
            order = order[1:] + order[:1]
    ms = lambda v: round(v * 1000, 3)  # noqa: E731
    p50 = {name: _pct(v, 0.5) for name, v in times.items()}
    p99 = {name: _pct(v, 0.99) for name, v in times.items()}
    out: dict[str, Any] = {
        "p50_ms": {k: ms(v) for k, v in p50.items()},
        "p50_added_ms": {k: ms(v - p50["direct"]) for k, v in p50.items() if k != "direct"},
        "p99_added_ms": {k: ms(v - p99["direct"]) for k, v in p99.items() if k != "direct"},
    }
    if "bare" in p50:
        bare = max(p50["bare"] - p50["direct"], 1e-6)
        out["p50_added_vs_bare"] = {k: round((p50[k] - p50["direct"]) / bare, 3) for k in p50 if k in DIALECTS}
    return out


async def _flood(http: aiohttp.ClientSession, arm: Arm, concurrency: int, window_s: float) -> tuple[int, float, float]:
    """`concurrency` calls in flight, each worker starting a new one as its last ends; (calls, seconds,
    the hop's CPU seconds) counted over `window_s` once all are in flight (the first `concurrency`
    have ended): the filling and draining, when fewer are in flight, are left out."""
    done = 0
    stop = False

    async def worker() -> None:
        nonlocal done
        while not stop:
            await call(http, arm)
            done += 1

    workers = [asyncio.ensure_future(worker()) for _ in range(concurrency)]
    try:
        while done < concurrency and not any(w.done() for w in workers):  # a failed call ends its worker
            await asyncio.sleep(0.002)
        calls, start, cpu = done, time.perf_counter(), cpu_seconds(arm.pid)
        await asyncio.sleep(window_s)
        calls, seconds, cpu = done - calls, time.perf_counter() - start, cpu_seconds(arm.pid) - cpu
    finally:
        stop = True
        await asyncio.gather(*workers)
    return calls, seconds, cpu


async def throughput(arms: list[Arm], concurrency: int, rounds: int, window_s: float) -> dict[str, Any]:
    """Requests per second per arm, and the CPU its hop spends per call (the figure least moved by
    whatever else the machine runs). The arms take turns, one `window_s` window each per round, so
    that the machine's drift hits every arm alike; `per_round` keeps each round's rates, from which
    `ratio` compares two arms."""
    calls = {a.name: 0 for a in arms}
    seconds = {a.name: 0.0 for a in arms}
    cpu = {a.name: 0.0 for a in arms}
    per_round: list[dict[str, float]] = []
    sessions = {a.name: aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) for a in arms}
    try:
        for arm in arms:  # open the connections
            await asyncio.gather(*(call(sessions[arm.name], arm) for _ in range(concurrency)))
        for _ in range(rounds):
            rates = {}
            for arm in arms:
                c, s, used = await _flood(sessions[arm.name], arm, concurrency, window_s)
                calls[arm.name] += c
                seconds[arm.name] += s
                cpu[arm.name] += used
                rates[arm.name] = round(c / s, 1)
            per_round.append(rates)
    finally:
        for http in sessions.values():
            await http.close()
    return {
        "rps": {a.name: round(calls[a.name] / seconds[a.name], 1) for a in arms},
        "cpu_ms_per_call": {a.name: round(1000 * cpu[a.name] / calls[a.name], 3) for a in arms if a.pid},
        "per_round": per_round,
    }


def ratio(per_round: list[dict[str, float]], arm: str, base: str) -> float:
    """`arm`'s rate over `base`'s, the median of the rounds': each round's pair ran back to back, and
    the median keeps a round the machine disturbed (a neighbour's burst, on a shared host) from
    moving the figure."""
    return round(statistics.median(r[arm] / r[base] for r in per_round), 3)


def run(
    latency_calls: int = 800,
    rounds: int = 8,
    window_s: float = 0.5,
    tokens: int = 16,
    token_delay_ms: float = 0.0,
    concurrency: int = 256,
    paced_concurrency: int = 64,
) -> dict[str, Any]:
    """Every scenario; `token_delay_ms` paces the paced upstream (0: 10 ms per token, a busy server)."""
    pacing = token_delay_ms or 10.0
    # the stores go with the run; the servers are stopped before them
    with tempfile.TemporaryDirectory(prefix="polar-bench-") as tmp, children() as procs:
        fast, paced, bare, proxy, undurable = (free_port() for _ in range(5))
        url = lambda port: f"http://127.0.0.1:{port}"  # noqa: E731
        fake = ["-m", "nemo_polar.bench.fake_upstream", "--tokens", str(tokens)]
        procs.append(spawn([*fake, "--port", str(fast)], url(fast) + "/health"))
        procs.append(spawn([*fake, "--port", str(paced), "--token-delay-ms", str(pacing)], url(paced) + "/health"))
        bare_args = ["--port", str(bare), "--upstream", url(fast)]
        procs.append(spawn(["-m", "nemo_polar.bench.bare", *bare_args], url(bare) + "/health"))
        proxy_args = [f"port={proxy}", "log_level=warning", f"upstream.url={url(fast)}", f"store.path={tmp}/r.sqlite"]
        procs.append(spawn(["-m", "nemo_polar.cli", "proxy", *proxy_args], url(proxy) + "/health"))
        proxy_args = [f"port={undurable}", *proxy_args[1:-1], f"store.path={tmp}/u.sqlite", "store.durable=false"]
        procs.append(spawn(["-m", "nemo_polar.cli", "proxy", *proxy_args], url(undurable) + "/health"))
        hops = Hop(url(bare), procs[2].pid), Hop(url(proxy), procs[3].pid), Hop(url(undurable), procs[4].pid)
        scenarios = asyncio.run(
            _measure(
                url(fast), url(paced), *hops, tokens, latency_calls, rounds, window_s, concurrency, paced_concurrency
            )
        )
    return _summary(scenarios) | {
        "latency_calls": latency_calls,
        "rounds": rounds,
        "window_s": window_s,
        "tokens": tokens,
        "concurrency": concurrency,
        "paced_concurrency": paced_concurrency,
        "paced_upstream_token_delay_ms": pacing,
        "cpus": os.cpu_count(),
        "scenarios": scenarios,
    }


async def _measure(
    fast: str,
    paced: str,
    bare: Hop,
    proxy: Hop,
    undurable: Hop,
    tokens: int,
    n: int,
    rounds: int,
    window_s: float,
    c: int,
    paced_c: int,
) -> list[dict[str, Any]]:
    key = await _session(proxy.url, {})
    paced_key = await _session(proxy.url, {"upstream_url": paced})  # the same proxy, this session's server paced
    undurable_key = await _session(undurable.url, {})
    scenarios: list[dict[str, Any]] = []
    for stream in (False, True):
        path, native, headers = dialect_call("openai_chat", undurable_key, tokens, stream)
        plain = Arm(
            UNDURABLE, undurable.url + path, orjson.dumps(native), {"Content-Type": "application/json"} | headers
        )
        each = [*arms(fast, bare, proxy, key, tokens, stream), dataclasses.replace(plain, pid=undurable.pid)]
        lat = await latency(each, n)
        scenarios.append({"kind": "latency", "stream": stream, "concurrency": 1} | lat)
        thr = await throughput(each, c, rounds, window_s)
        rps, cpu, each_round = thr["rps"], thr["cpu_ms_per_call"], thr["per_round"]
        scenarios.append(
            {
                "kind": "throughput",
                "stream": stream,
                "concurrency": c,
                **thr,
                "vs_direct": {k: round(v / rps["direct"], 3) for k, v in rps.items() if k != "direct"},
                "vs_bare": {k: ratio(each_round, k, "bare") for k in rps if k in DIALECTS},
                # None when the run was too short for the clock's ticks (10 ms) to see the bare relay
                "cpu_vs_bare": {
                    k: round(v / cpu["bare"], 3) if cpu["bare"] else None for k, v in cpu.items() if k in DIALECTS
                },
            }
        )
        paced_arms = arms(paced, None, proxy, paced_key, tokens, stream, ("openai_chat",))
        # paced calls last ~0.2 s and end in waves: 3 rounds of windows 8x as long, so that a window's
        # count does not hinge on whether one more wave fell inside it
        thr = await throughput(paced_arms, paced_c, 3, 8 * window_s)
        scenarios.append(
            {
                "kind": "paced",
                "stream": stream,
                "concurrency": paced_c,
                "rps": thr["rps"],
                "per_round": thr["per_round"],
                "throughput_ratio": ratio(thr["per_round"], "openai_chat", "direct"),
            }
        )
    return scenarios


def _summary(scenarios: list[dict[str, Any]]) -> dict[str, Any]:
    """The headline figures: the worst of every dialect and mode."""
    lat = [s for s in scenarios if s["kind"] == "latency"]
    thr = {s["stream"]: s for s in scenarios if s["kind"] == "throughput"}
    worst = lambda key, pick: pick(v for s in lat for k, v in s[key].items() if k in DIALECTS)  # noqa: E731
    return {
        "p50_added_ms": worst("p50_added_ms", max),
        "p99_added_ms": worst("p99_added_ms", max),
        "p50_added_vs_bare": worst("p50_added_vs_bare", max),
        "throughput_vs_bare": min(thr[False]["vs_bare"].values()),
        "stream_throughput_vs_bare": min(thr[True]["vs_bare"].values()),
        "throughput_ratio": min(s["throughput_ratio"] for s in scenarios if s["kind"] == "paced"),
        "durable_cost": {  # Chat Completions, store.durable on minus off, in the same run
            ("stream" if s["stream"] else "whole") + "_p50_ms": round(
                s["p50_ms"]["openai_chat"] - s["p50_ms"][UNDURABLE], 3
            )
            for s in lat
        }
        | {
            ("stream" if stream else "whole") + "_cpu_ms_per_call": round(
                s["cpu_ms_per_call"]["openai_chat"] - s["cpu_ms_per_call"][UNDURABLE], 3
            )
            for stream, s in thr.items()
        },
    }


async def _session(proxy: str, opening: dict[str, Any]) -> str:
    async with aiohttp.ClientSession() as http:
        async with http.post(proxy + "/admin/sessions", json=opening) as resp:
            return (await resp.json())["api_key"]
