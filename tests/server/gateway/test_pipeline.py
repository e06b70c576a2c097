"""The staged pipeline with fake stages: what it promises about ordering, budgets and cleanup."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter

from nemo_polar.bench.pipeline import run as bench_run
from nemo_polar.contracts import SessionState as S
from nemo_polar.server.gateway.pipeline import Job, Pipeline


class Fake:
    """Each session's `data` says how long its stages take; `run: None` blocks until `gate` opens."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.order: list[str] = []
        self.gate = asyncio.Event()
        self.seen_partial: dict[str, list] = {}

    async def init(self, s: Job) -> None:
        self.calls["init"] += 1
        self.order.append(s.session_id)
        if s.data.get("init_error"):
            raise RuntimeError("sandbox would not start")
        await asyncio.sleep(s.data.get("init", 0))

    async def run(self, s: Job) -> None:
        self.calls["run"] += 1
        d = s.data.setdefault("partial", [])
        if s.data.get("run") is None:
            await self.gate.wait()
            return
        if s.data["run"] == "forever":
            while True:
                d.append(len(d))
                await asyncio.sleep(0.01)
        if s.data["run"] == "stubborn":  # a bug: it swallows its cancellation until the gate opens
            while not self.gate.is_set():
                with contextlib.suppress(asyncio.CancelledError):
                    await self.gate.wait()
            return
        await asyncio.sleep(s.data["run"])

    async def prewarm_eval(self, s: Job) -> None:
        self.calls["prewarm"] += 1
        await asyncio.sleep(s.data.get("prewarm", 0))

    async def postrun(self, s: Job) -> None:
        self.calls["postrun"] += 1
        self.seen_partial[s.session_id] = list(s.data.get("partial", []))


def go(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


async def until(pred, timeout: float = 5.0) -> None:
    async def poll():
        while not pred():
            await asyncio.sleep(0.005)

    await asyncio.wait_for(poll(), timeout)


def sess(i, **data) -> Job:
    keys = ("group", "priority", "session_timeout_s", "agent_timeout_s")
    kw = {k: data.pop(k) for k in keys if k in data}
    return Job(f"s{i}", data, **kw)


def test_ready_buffer_does_not_hold_init_workers():
    async def body():
        f = Fake()
        async with Pipeline(1, 1, 1, 3, f) as p:
            futs = [p.submit(sess(i, init=0.01, run=None)) for i in range(6)]
            # one INIT worker, RUN saturated: INIT still fills READY up to ready_target + init_workers
            await until(lambda: p.metrics().ready == 4)
            await asyncio.sleep(0.05)
            m = p.metrics()
            assert (m.run_inflight, m.ready, m.init_inflight, m.init_queue) == (1, 4, 0, 1)
            assert f.calls["init"] == 5
            f.gate.set()
            done = await asyncio.gather(*futs)
        assert all(s.state is S.COMPLETED for s in done)
        assert f.calls["init"] == f.calls["postrun"] == 6

    go(body())


def test_priority_then_arrival():
    async def body():
        f = Fake()
        async with Pipeline(1, 1, 1, 0, f) as p:
            prios = [0, 5, 1, 5, 0]
            futs = [p.submit(sess(i, priority=pr, run=0)) for i, pr in enumerate(prios)]
            await asyncio.gather(*futs)
        assert f.order == ["s1", "s3", "s2", "s0", "s4"]

    go(body())


def test_agent_budget_excludes_ready_time_but_session_budget_does_not():
    async def body():
        f = Fake()
        async with Pipeline(2, 1, 1, 2, f) as p:
            first = p.submit(sess(0, run=0.4))
            waits = p.submit(sess(1, run=0.2, agent_timeout_s=0.45))  # READY ~0.4 s + RUN 0.2 s > 0.45
            tight = p.submit(sess(2, run=0.5, session_timeout_s=0.8))  # READY ~0.6 s + RUN 0.5 s > 0.8
            a, b, c = await asyncio.gather(first, waits, tight)
        assert a.state is S.COMPLETED
        assert b.state is S.COMPLETED and b.timing.ready_wait_s > 0.3
        assert c.state is S.TIMEOUT and c.cause == "timeout:session:running"
        assert f.calls["init"] == f.calls["postrun"] == 3

    go(body())


def test_run_timeout_keeps_partial_results():
    async def body():
        f = Fake()
        async with Pipeline(1, 1, 1, 0, f) as p:
            s = await p.submit(sess(0, run="forever", agent_timeout_s=0.1))
        assert s.state is S.TIMEOUT and s.cause == "timeout:agent:running"
        assert len(f.seen_partial["s0"]) >= 3  # POST-RUN saw what the agent had done
        assert f.calls["postrun"] == 1

    go(body())


def test_a_stage_that_does_not_stop_is_left_behind_and_its_session_ends_on_time():
    async def body():
        f = Fake()
        async with Pipeline(1, 1, 1, 0, f, stop_grace_s=0.2) as p:
            t0 = asyncio.get_running_loop().time()
            s = await p.submit(sess(0, run="stubborn", agent_timeout_s=0.1))
            took = asyncio.get_running_loop().time() - t0
            f.gate.set()  # the stubborn stage may end now (asyncio.run waits for it)
        assert s.state is S.TIMEOUT and s.cause == "timeout:agent:running" and took < 1.0, took
        assert f.calls["postrun"] == 1

    go(body())


def test_cancel_at_every_stage_runs_cleanup():
    async def body():
        f = Fake()
        states: list[tuple[str, S, str | None]] = []
        async with Pipeline(1, 1, 1, 1, f, on_transition=lambda *a: states.append(a)) as p:
            running = p.submit(sess(0, run=None, prewarm=10))
            ready = p.submit(sess(1, run=None))
            initializing = p.submit(sess(2, init=10, run=None))
            queued = p.submit(sess(3, run=None))
            await until(lambda: (p.metrics().run_inflight, p.metrics().ready, p.metrics().init_inflight) == (1, 1, 1))
            for i in (0, 1, 2, 3):
                assert p.cancel(f"s{i}", "task_cancelled")
            done = await asyncio.gather(running, ready, initializing, queued)
        assert [s.state for s in done] == [S.CANCELLED] * 4
        assert all(s.cause == "task_cancelled" for s in done)
        assert f.calls["init"] == f.calls["postrun"] == 3  # the queued one never had a sandbox
        assert ("s3", S.CANCELLED, "task_cancelled") in states
        assert ("s0", S.POST_RUN, "task_cancelled") in states

    go(body())


def test_stragglers_stopped_by_the_rollout_server_are_cleaned_up():
    """Early stop is the rollout server's (it sees the whole group): it stops the stragglers on their
    node, as `DELETE /sessions/{id}` does here, and each is still cleaned up."""

    async def body():
        f = Fake()
        async with Pipeline(4, 4, 4, 0, f) as p:
            runs = [0.01, 0.02, 10, 10]
            futs = [p.submit(sess(i, group="g", run=r)) for i, r in enumerate(runs)]
            await asyncio.gather(*futs[:2])
            assert [p.cancel(f"s{i}", "early stop: 2 sessions completed") for i in (2, 3)] == [True, True]
            done = await asyncio.gather(*futs)
        assert [s.state for s in done] == [S.COMPLETED, S.COMPLETED, S.CANCELLED, S.CANCELLED]
        assert {s.cause for s in done[2:]} == {"early stop: 2 sessions completed"}
        assert f.calls["init"] == f.calls["postrun"] == 4

    go(body())


def test_init_error_and_cancel_group():
    async def body():
        f = Fake()
        async with Pipeline(2, 1, 1, 0, f) as p:
            bad = await p.submit(sess(0, init_error=True))
            futs = [p.submit(sess(i, group="t", run=None)) for i in range(1, 4)]
            await until(lambda: p.metrics().run_inflight == 1)
            assert p.cancel_group("t") == 3
            done = await asyncio.gather(*futs)
        assert bad.state is S.ERROR and "sandbox would not start" in bad.error
        assert all(s.state is S.CANCELLED for s in done)
        assert f.calls["init"] == f.calls["postrun"]

    go(body())


def test_pause_holds_run_starts():
    async def body():
        f = Fake()
        async with Pipeline(2, 2, 1, 4, f) as p:
            p.pause()
            futs = [p.submit(sess(i, run=0)) for i in range(4)]
            await until(lambda: p.metrics().ready == 4)
            await asyncio.sleep(0.05)
            assert f.calls["run"] == 0 and p.metrics().run_inflight == 0
            p.resume()
            done = await asyncio.gather(*futs)
        assert all(s.state is S.COMPLETED for s in done)

    go(body())


def test_metrics_consistent_and_transitions_in_order():
    async def body():
        f = Fake()
        snapshots, seq = [], {}
        n = 12
        pipe: list[Pipeline] = []

        def observe(sid, state, cause):
            seq.setdefault(sid, []).append(state)
            if pipe:
                snapshots.append((pipe[0].metrics(), sum(st[-1].terminal for st in seq.values())))

        async with Pipeline(2, 3, 2, 2, f, on_transition=observe) as p:
            pipe.append(p)
            futs = [p.submit(sess(i, init=0.01, run=0.02, prewarm=0.01)) for i in range(n)]
            await asyncio.gather(*futs)
            assert p.metrics().model_dump(exclude={"recording"}) == dict.fromkeys(
                p.metrics().model_dump(exclude={"recording"}), 0
            )
        for m, final in snapshots:
            d = m.model_dump(exclude={"recording"})
            assert min(d.values()) >= 0
            assert m.init_inflight <= 2 and m.run_inflight <= 3 and m.postrun_inflight <= 2
            assert m.ready + m.init_inflight <= 2 + 2
            assert sum(d.values()) + final <= n
        happy = [S.REGISTERED, S.INITIALIZING, S.READY, S.RUNNING, S.POST_RUN, S.COMPLETED]
        assert all(states == happy for states in seq.values())
        assert f.calls["prewarm"] == n

    go(body())


def test_close_cancels_live_sessions_and_cleans_up():
    async def body():
        f = Fake()
        p = Pipeline(2, 1, 1, 2, f)
        p.start()
        futs = [p.submit(sess(i, run=None)) for i in range(5)]
        await until(lambda: p.metrics().run_inflight == 1)
        await p.close()
        assert all(fut.result().state is S.CANCELLED for fut in futs)
        assert f.calls["init"] == f.calls["postrun"]

    go(body())


def test_bench_shape():
    r = bench_run(sessions=12, seed=1, time_scale=0.0002)
    for key in ("busy_fraction_staged", "busy_fraction_naive", "speedup", "settings"):
        assert key in r
    assert 0 < r["busy_fraction_naive"] <= 1 and 0 < r["busy_fraction_staged"] <= 1
    assert r["speedup"] > 0 and r["settings"]["sessions"] == 12


def test_from_dispatch_and_stage_reports():
    from nemo_polar.contracts import DispatchRequest, HarnessSpec, TaskSpec

    task = TaskSpec(
        task_id="t1",
        instruction="fix it",
        harness=HarnessSpec(name="codex"),
        priority=7,
        agent_timeout_s=30,
        session_timeout_s=60,
        num_samples=4,
        early_stop_k=2,
    )
    s = Job.from_dispatch(DispatchRequest(session_id="x", task=task, callback_url="http://cb"), {"run": 0})
    assert (s.group, s.priority, s.agent_timeout_s, s.session_timeout_s, s.data) == ("t1", 7, 30, 60, {"run": 0})

    class Reporting(Fake):
        async def postrun(self, s: Job) -> None:
            s.report(S.BUILDING)
            s.report(S.EVALUATING, "eval")

    async def body():
        seen = []
        async with Pipeline(1, 1, 1, 0, Reporting(), on_transition=lambda *a: seen.append(a[1:])) as p:
            await p.submit(sess(0, run=0))
        return seen

    seen = go(body())
    assert seen[-3:] == [(S.BUILDING, None), (S.EVALUATING, "eval"), (S.COMPLETED, None)]


def test_random_cancels_and_timeouts_never_leak_a_sandbox():
    import random

    async def body():
        rng = random.Random(7)
        f = Fake()
        async with Pipeline(3, 2, 2, 2, f) as p:
            futs = []
            for i in range(60):
                d = {"init": rng.uniform(0, 0.02), "run": rng.choice([0.0, 0.01, 0.03, "forever"]), "prewarm": 0.01}
                kw = {"group": f"g{i % 6}", "agent_timeout_s": 0.05}
                futs.append(p.submit(sess(i, **d, **kw)))
            for _ in range(25):
                await asyncio.sleep(rng.uniform(0, 0.01))
                p.cancel(f"s{rng.randrange(60)}", "random")
            done = await asyncio.gather(*futs)
        assert all(s.state.terminal for s in done)
        assert f.calls["init"] == f.calls["postrun"]
        assert p.metrics().model_dump(exclude={"recording"}) == dict.fromkeys(
            p.metrics().model_dump(exclude={"recording"}), 0
        )

    go(body())


def test_ready_session_is_reaped_when_its_budget_ends_while_every_run_slot_is_held():
    async def body():
        f = Fake()
        async with Pipeline(1, 1, 1, 2, f) as p:
            p.submit(sess(0, run=None))  # holds the only RUN slot until the gate opens
            t0 = asyncio.get_running_loop().time()
            parked = await p.submit(sess(1, run=0.01, session_timeout_s=0.3))
            waited = asyncio.get_running_loop().time() - t0
            assert parked.state is S.TIMEOUT and parked.cause == "timeout:session:ready"
            assert waited < 2.0  # ended at its deadline, not when a RUN slot freed up
            assert f.calls["postrun"] == 1  # its sandbox was recycled right away
            f.gate.set()
            await p.drain()
        assert f.calls["run"] == 1 and f.calls["postrun"] == 2

    go(body())


def test_pause_holds_run_starts_and_resume_releases_them():
    async def body():
        f = Fake()
        async with Pipeline(1, 1, 1, 2, f) as p:
            p.pause()
            fut = p.submit(sess(0, run=0.01))
            await until(lambda: p.metrics().ready == 1)
            await asyncio.sleep(0.1)
            assert f.calls["run"] == 0 and not fut.done()
            p.resume()
            assert (await fut).state is S.COMPLETED

    go(body())


def test_a_pipeline_holds_nothing_of_the_sessions_it_finished():
    """A node runs groups for days: once their sessions end (done, failed or cancelled), nothing of them or
    of their group is left in the pipeline."""

    async def body():
        f = Fake()
        async with Pipeline(2, 2, 2, 2, f) as p:
            done = [p.submit(sess(i, group=f"g{i // 4}", run=0)) for i in range(12)]
            failed = p.submit(sess(12, group="g3", init_error=True, run=0))
            held = p.submit(sess(13, group="g4", run=None))
            await asyncio.gather(*done, failed)
            assert p.cancel_group("g4", "early stop") == 1
            await held
            assert (p._live, p._groups) == ({}, {})

    go(body())
