"""How busy the serving engine is, read from the engine itself: vLLM's `vllm:num_requests_running` gauge,
sampled from its `/metrics` several times a second. The busy fraction of a span is the share of its samples that
saw a request running: the rollout GPU utilisation the async GRPO literature reports, on this machine's engine."""

from __future__ import annotations

import bisect
import threading
import time
import urllib.request

GAUGE = "vllm:num_requests_running"


def running(metrics: str) -> float | None:
    """The gauge's value in a Prometheus text page, summed over its labels (engines); None: not exported (an
    engine started with its stats off, NeMo-RL's HTTP server)."""
    values = [
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith(GAUGE) and line[len(GAUGE)] in "{ "
    ]
    return sum(values) if values else None


class EngineBusy:
    def __init__(self, url: str, every_s: float = 0.1):
        self.url, self.every_s = url, every_s
        self.times: list[float] = []
        self.busy: list[bool] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="engine-busy", daemon=True)

    def __enter__(self) -> EngineBusy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _poll(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                with urllib.request.urlopen(self.url + "/metrics", timeout=5) as r:
                    now = running(r.read().decode())
            except OSError:  # restarting (a weight update where it cannot reload in place): not serving
                now = 0.0
            if now is None:
                continue
            self.times.append(time.monotonic())
            self.busy.append(now > 0)

    def fraction(self, since: float, until: float) -> float | None:
        """The share of samples in [since, until] that saw a request running (None: none taken)."""
        lo, hi = bisect.bisect_left(self.times, since), bisect.bisect_right(self.times, until)
        seen = self.busy[lo:hi]
        return round(sum(seen) / len(seen), 4) if seen else None
