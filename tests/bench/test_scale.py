"""`polar bench scale` on a small load: the real rollout server process, simulated nodes. What it
must show at any size: every session dispatched once, all in flight together, none lost."""

from __future__ import annotations

from nemo_polar.bench.scale import run


def test_scale_bench_loses_nothing_and_dispatches_once():
    out = run(sessions=240, nodes=4, group=8, duration_s=4.0)
    assert out["completed"] == out["sessions"] == 240 and out["lost"] == 0
    assert out["dispatched_twice"] == 0 and out["undelivered_callbacks"] == 0
    assert out["peak_in_flight"] == 240  # every session was in flight at once
    assert 0 < out["dispatch_latency_ms_p50"] <= out["dispatch_latency_ms_p99"] <= out["dispatch_latency_ms_max"]
    assert out["rollout_server_rss_mb_peak"] >= out["rollout_server_rss_mb_idle"] > 0
