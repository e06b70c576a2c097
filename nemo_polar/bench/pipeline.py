"""Naive slots against the staged pipeline, on simulated sessions sharing one bounded upstream.

Each session: a long-tailed sandbox start-up (lognormal), an agent making several LLM calls to an
in-process upstream that serves at most `capacity` generations at once (a call holds a slot for
tokens x per-token delay) with tool time between calls, then a long-tailed evaluation (its own
sandbox start-up, then the tests). Every long tail is cut at `tail_cap` x its median, as a stage
timeout would. Both arms replay the same sampled sessions; times are simulated seconds multiplied
by `time_scale`, so a run takes seconds.

(a) naive: `slots` workers, each doing init -> run -> evaluate in sequence.
(b) staged: the Pipeline with `slots` RUN workers, its own INIT and POST-RUN pools, a READY buffer
    and the evaluation sandbox started while the agent works.

busy_fraction: the upstream's slots in use, integrated over the arm's whole wall time, over
capacity x wall (ramp-up and the last evaluations included).
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import asdict, dataclass

from ..server.gateway.pipeline import Job, Pipeline


@dataclass(frozen=True)
class Workload:
    init_median_s: float = 40.0  # container start + repo preparation
    init_sigma: float = 0.9
    calls: tuple[int, int] = (6, 10)
    tokens: tuple[int, int] = (200, 400)  # generated per call
    per_token_s: float = 0.02  # decode time per token at full batch
    tool_s: tuple[float, float] = (0.5, 1.5)  # the agent's own work between calls
    eval_start_median_s: float = 25.0  # evaluation sandbox start-up
    eval_start_sigma: float = 0.9
    eval_median_s: float = 30.0  # running the tests
    eval_sigma: float = 0.8
    tail_cap: float = 5.0


@dataclass
class Profile:
    init: float
    calls: list[tuple[int, float]]  # (tokens, tool seconds after the call)
    eval_start: float
    eval: float


def sample(w: Workload, n: int, seed: int) -> list[Profile]:
    rng = random.Random(seed)

    def tail(median: float, sigma: float) -> float:
        return min(median * rng.lognormvariate(0, sigma), median * w.tail_cap)

    return [
        Profile(
            init=tail(w.init_median_s, w.init_sigma),
            calls=[(rng.randint(*w.tokens), rng.uniform(*w.tool_s)) for _ in range(rng.randint(*w.calls))],
            eval_start=tail(w.eval_start_median_s, w.eval_start_sigma),
            eval=tail(w.eval_median_s, w.eval_sigma),
        )
        for _ in range(n)
    ]


class Upstream:
    """At most `capacity` generations at once; integrates slots in use over time."""

    def __init__(self, capacity: int, per_token_s: float, scale: float) -> None:
        self.capacity, self.per_token_s, self.scale = capacity, per_token_s, scale
        self._sem = asyncio.Semaphore(capacity)
        self.in_use, self.area, self.calls = 0, 0.0, 0
        self._last = time.monotonic()
        self.first = self.last = None  # the first generation's start, the last one's end

    def tick(self) -> None:
        now = time.monotonic()
        self.area += self.in_use * (now - self._last)
        self._last = now

    async def generate(self, tokens: int) -> None:
        async with self._sem:
            self.tick()
            self.first = self.first or self._last
            self.in_use += 1
            try:
                await asyncio.sleep(tokens * self.per_token_s * self.scale)
            finally:
                self.tick()
                self.in_use -= 1
                self.calls += 1
                self.last = self._last


class Sim:
    """The stages, for both arms: sleeps for sandboxes, the upstream for the agent."""

    def __init__(self, upstream: Upstream, scale: float) -> None:
        self.up, self.scale = upstream, scale

    async def sleep(self, sim_s: float) -> None:
        await asyncio.sleep(sim_s * self.scale)

    async def init(self, s: Job[Profile]) -> None:
        await self.sleep(s.data.init)

    async def run(self, s: Job[Profile]) -> None:
        for tokens, tool in s.data.calls:
            await self.up.generate(tokens)
            await self.sleep(tool)

    async def prewarm_eval(self, s: Job[Profile]) -> None:
        await self.sleep(s.data.eval_start)

    async def postrun(self, s: Job[Profile]) -> None:  # the pipeline has awaited the prewarm
        await self.sleep(s.data.eval)


async def _naive(profiles: list[Profile], sim: Sim, slots: int) -> None:
    todo = list(reversed(profiles))

    async def slot() -> None:
        while todo:
            s = Job(str(len(todo)), todo.pop())
            await sim.init(s)
            await sim.run(s)
            await sim.prewarm_eval(s)  # no overlap: the evaluation sandbox starts after the agent
            await sim.postrun(s)

    await asyncio.gather(*(slot() for _ in range(slots)))


async def _staged(
    profiles: list[Profile], sim: Sim, slots: int, init_workers: int, postrun_workers: int, ready_target: int
) -> None:
    async with Pipeline(init_workers, slots, postrun_workers, ready_target, sim) as pipe:
        futures = [pipe.submit(Job(f"s{i}", p)) for i, p in enumerate(profiles)]
        done = await asyncio.gather(*futures)
    bad = [s.state for s in done if s.state != "completed"]
    if bad:
        raise RuntimeError(f"{len(bad)} simulated sessions did not complete: {bad[:3]}")


def _arm(profiles: list[Profile], w: Workload, capacity: int, scale: float, body) -> dict:
    async def go() -> dict:
        up = Upstream(capacity, w.per_token_s, scale)
        t0 = time.monotonic()
        await body(Sim(up, scale))
        wall = time.monotonic() - t0
        up.tick()
        window = (up.last - up.first) if up.calls else wall
        return {
            "wall_s": wall,
            "busy": up.area / (capacity * wall),
            "calls": up.calls,
            "busy_window": up.area / (capacity * window),
        }

    return asyncio.run(go())


def run(
    sessions: int = 512,  # a GRPO step: 64 prompts x 8 samples
    seed: int = 0,
    capacity: int = 8,
    slots: int = 10,
    init_workers: int = 16,
    postrun_workers: int = 12,
    ready_target: int = 8,
    time_scale: float = 0.002,
    workload: Workload | None = None,
) -> dict:
    w = workload or Workload()
    profiles = sample(w, sessions, seed)
    naive = _arm(profiles, w, capacity, time_scale, lambda sim: _naive(profiles, sim, slots))
    staged = _arm(
        profiles,
        w,
        capacity,
        time_scale,
        lambda sim: _staged(profiles, sim, slots, init_workers, postrun_workers, ready_target),
    )
    return {
        "busy_fraction_staged": round(staged["busy"], 3),
        "busy_fraction_naive": round(naive["busy"], 3),
        "speedup": round(naive["wall_s"] / staged["wall_s"], 2),
        "wall_s_staged": round(staged["wall_s"], 3),
        "wall_s_naive": round(naive["wall_s"], 3),
        # the same, over the first generation's start to the last one's end (no ramp-up, no drain)
        "busy_fraction_staged_window": round(staged["busy_window"], 3),
        "busy_fraction_naive_window": round(naive["busy_window"], 3),
        "llm_calls": staged["calls"],
        "settings": {
            "sessions": sessions,
            "seed": seed,
            "capacity": capacity,
            "slots": slots,
            "init_workers": init_workers,
            "postrun_workers": postrun_workers,
            "ready_target": ready_target,
            "time_scale": time_scale,
            "workload": asdict(w),
        },
    }


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
