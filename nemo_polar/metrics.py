"""Prometheus metrics: what each server exposes at `GET /metrics`, in the text format dashboards scrape.

Each server instance has its own registry (several share a process in tests and in `polar up`). Counts
that live in a store (sessions by state, the dispatch queue) are read when scraped, so they always agree
with the store; events (calls, tokens, latencies) are counted where they happen, once each.

    proxy          polar_proxy_calls_total{dialect,status}, polar_proxy_{prompt,completion}_tokens_total,
                   polar_proxy_added_latency_seconds, polar_proxy_time_to_first_token_seconds,
                   polar_proxy_upstream_busy_fraction, polar_proxy_inflight_calls
    gateway node   polar_node_pool_sessions{stage}, polar_node_outbox_results
    rollout server polar_rollout_sessions{state}, polar_rollout_queue_depth, polar_rollout_nodes{healthy},
                   polar_rollout_dispatch_latency_seconds, polar_rollout_grader_touched_sessions_total{kind}
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.responses import Response

from .session_cache import SessionCache

LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
SLOW_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


def scrape(*registries: CollectorRegistry) -> Response:
    """`GET /metrics` over one or more registries (a gateway node shows its own and its proxy's)."""
    return Response(b"".join(generate_latest(r) for r in registries), media_type=CONTENT_TYPE_LATEST)


class Gauges(Collector):
    """Gauges computed at scrape time: `read()` yields (name, help, labels, {label values: value})."""

    def __init__(self, read: Callable[[], Iterable[tuple[str, str, list[str], dict[tuple[str, ...], float]]]]):
        self.read = read

    def collect(self) -> Iterator[GaugeMetricFamily]:
        for name, doc, labels, values in self.read():
            family = GaugeMetricFamily(name, doc, labels=labels)
            for key, value in values.items():
                family.add_metric(list(key), value)
            yield family


class ProxyMetrics:
    """Counted once per call, where the call's record is made."""

    def __init__(self, cache: SessionCache | None = None) -> None:
        self.registry = CollectorRegistry()
        self.cache = cache  # what open sessions hold (session_cache.py)
        r = self.registry
        self.calls = Counter(
            "polar_proxy_calls", "model calls, by dialect and record status", ["dialect", "status"], registry=r
        )
        self.prompt_tokens = Counter("polar_proxy_prompt_tokens", "prompt tokens of recorded calls", registry=r)
        self.completion_tokens = Counter(
            "polar_proxy_completion_tokens", "sampled tokens of recorded calls", registry=r
        )
        self.added = Histogram(
            "polar_proxy_added_latency_seconds",
            "time a call spent in the proxy, the upstream's own time left out",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.first_token = Histogram(
            "polar_proxy_time_to_first_token_seconds",
            "from the harness's request to the first token relayed (streamed calls)",
            buckets=SLOW_BUCKETS,
            registry=r,
        )
        self._busy = Busy()
        self._calls: dict[tuple[str, str], Any] = {}  # labelled children, looked up once per pair
        r.register(Gauges(self._gauges))

    def call(
        self,
        dialect: str,
        status: str,
        prompt: int,
        completion: int,
        added_s: float | None,
        first_token_s: float | None,
    ) -> None:
        counter = self._calls.get((dialect, status))
        if counter is None:
            counter = self._calls[(dialect, status)] = self.calls.labels(dialect, status)
        counter.inc()
        self.prompt_tokens.inc(prompt)
        self.completion_tokens.inc(completion)
        if added_s is not None:
            self.added.observe(max(added_s, 0.0))
        if first_token_s is not None:
            self.first_token.observe(first_token_s)

    def upstream(self, delta: int) -> None:
        """A call to the inference server started (+1) or ended (-1)."""
        self._busy.change(delta)

    def _gauges(self) -> Iterator[tuple[str, str, list[str], dict[tuple[str, ...], float]]]:
        yield "polar_proxy_inflight_calls", "calls waiting on the inference server now", [], {(): self._busy.inflight}
        yield (
            "polar_proxy_upstream_busy_fraction",
            "share of the time since start with at least one call at the inference server",
            [],
            {(): self._busy.fraction()},
        )
        if self.cache is not None:
            cache = self.cache
            yield (
                "polar_proxy_session_cache_bytes",
                "what open sessions hold to make their next calls cheap",
                [],
                {(): cache.bytes},
            )
            yield (
                "polar_proxy_session_cache_limit_bytes",
                "its bound (limits.session_cache_bytes)",
                [],
                {(): cache.limit},
            )
            yield (
                "polar_proxy_session_cache_evicted",
                "values dropped to stay under the bound, ever",
                [],
                {(): cache.evicted},
            )


class Busy:
    """How much of the time the upstream had at least one call: a running integral of `inflight > 0`."""

    def __init__(self) -> None:
        self.start = self.since = time.monotonic()
        self.busy_s = 0.0
        self.inflight = 0

    def change(self, delta: int) -> None:
        now = time.monotonic()
        if self.inflight > 0:
            self.busy_s += now - self.since
        self.since, self.inflight = now, self.inflight + delta

    def fraction(self) -> float:
        now = time.monotonic()
        busy = self.busy_s + (now - self.since if self.inflight > 0 else 0.0)
        return busy / max(now - self.start, 1e-9)


class RolloutMetrics:
    """The rollout server's: read from its store when scraped, dispatch latency counted at dispatch."""

    def __init__(self, store: Any, nodes_alive: Callable[[], dict[str, bool]]) -> None:
        self.registry = CollectorRegistry()
        self.dispatch_latency = Histogram(
            "polar_rollout_dispatch_latency_seconds",
            "from a session waiting (submitted or re-queued) to its dispatch to a node",
            buckets=SLOW_BUCKETS,
            registry=self.registry,
        )
        self.grader_touched = Counter(
            "polar_rollout_grader_touched_sessions",
            "sessions whose agent reached for the grader (evaluators.GRADER_TOUCHES), by kind",
            ["kind"],
            registry=self.registry,
        )
        self.store, self.nodes_alive = store, nodes_alive
        self.registry.register(Gauges(self._gauges))

    def _gauges(self) -> Iterator[tuple[str, str, list[str], dict[tuple[str, ...], float]]]:
        by_state = self.store.state_counts()
        yield "polar_rollout_sessions", "sessions, by state", ["state"], {(k,): v for k, v in by_state.items()}
        yield "polar_rollout_queue_depth", "sessions waiting for a node", [], {(): self.store.queue_depth()}
        alive = self.nodes_alive()
        healthy = {("true",): sum(alive.values()), ("false",): len(alive) - sum(alive.values())}
        yield "polar_rollout_nodes", "registered gateway nodes, by health", ["healthy"], healthy


class NodeGauges:
    """A gateway node's: its pools' occupancy and the results waiting in its outbox, read when scraped."""

    def __init__(self, pools: Callable[[], dict[str, int]], outbox: Callable[[], int]) -> None:
        self.registry = CollectorRegistry()
        self.pools, self.outbox = pools, outbox
        self.registry.register(Gauges(self._gauges))

    def _gauges(self) -> Iterator[tuple[str, str, list[str], dict[tuple[str, ...], float]]]:
        pools = {(stage,): float(n) for stage, n in self.pools().items()}
        yield (
            "polar_node_pool_sessions",
            "sessions in each stage (INIT, READY, RUN, POST-RUN, queued)",
            ["stage"],
            pools,
        )
        yield "polar_node_outbox_results", "results written but not yet acknowledged", [], {(): float(self.outbox())}
