"""`polar bench proxy` on a small load: every arm answers, and the JSON carries the figures the
docs/benchmarks.md quotes, each a ratio that is computed from the arms it names."""

from __future__ import annotations

from nemo_polar.bench.proxy import DIALECTS, UNDURABLE, run


def test_proxy_bench_reports_every_dialect_against_the_bare_relay():
    out = run(latency_calls=20, rounds=3, window_s=0.1, tokens=4, concurrency=8, paced_concurrency=8, token_delay_ms=2)
    lat = [s for s in out["scenarios"] if s["kind"] == "latency"]
    thr = {s["stream"]: s for s in out["scenarios"] if s["kind"] == "throughput"}
    assert {s["stream"] for s in lat} == set(thr) == {False, True}
    for s in lat:
        assert set(s["p50_added_vs_bare"]) == set(DIALECTS)
    for s in thr.values():
        assert set(s["rps"]) == {"direct", "bare", *DIALECTS, UNDURABLE} and all(v > 0 for v in s["rps"].values())
        assert len(s["per_round"]) == 3
        # each round's pair, back to back; the median of the three
        rounds = sorted(r["anthropic"] / r["bare"] for r in s["per_round"])
        assert s["vs_bare"]["anthropic"] == round(rounds[1], 3)
    assert out["stream_throughput_vs_bare"] == min(thr[True]["vs_bare"].values())
    assert out["throughput_vs_bare"] == min(thr[False]["vs_bare"].values())
    assert out["p50_added_vs_bare"] == max(v for s in lat for v in s["p50_added_vs_bare"].values())
    assert out["p50_added_ms"] > 0 and 0 < out["throughput_ratio"]
    # what durable records cost: the same Chat call through a proxy with store.durable=false, same run
    by_mode = {s["stream"]: s for s in lat}
    for mode, name in ((False, "whole"), (True, "stream")):
        p50 = by_mode[mode]["p50_ms"]
        assert out["durable_cost"][f"{name}_p50_ms"] == round(p50["openai_chat"] - p50[UNDURABLE], 3)
