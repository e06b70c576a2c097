"""`polar bench long` on a short session: every arm answers every turn, the store is measured where
docs/benchmarks.md says, and the session's traces are built from it in a process of their own."""

from __future__ import annotations

import pytest

from nemo_polar.bench.long import run
from nemo_polar.paths import TINY_MODEL


def test_long_session_bench_reports_storage_latency_and_the_trace_build():
    out = run(turns=[8, 16], sessions=2, window=4, tokenizer=str(TINY_MODEL))
    for mode in ("fake", "tokenizer"):
        r = out[mode]
        sizes = r["sizes"]
        assert list(sizes) == [8, 16] and sizes[16]["request_bytes"] > sizes[8]["request_bytes"] > 0
        for s in sizes.values():  # bytes per session, and their ratio to that turn's request
            assert s["ratio_to_request"] == round(s["store_bytes_per_session"] / s["request_bytes"], 2)
        assert r["growth"]["turns"] == [8, 16]
        assert r["growth"]["store_bytes"] == round(
            sizes[16]["store_bytes_per_session"] / sizes[8]["store_bytes_per_session"], 2
        )
        for window in ("first", "last"):
            lat = r["latency"][window]
            assert set(lat["p50_ms"]) == {"direct", "bare", "proxy"} and all(v > 0 for v in lat["p50_ms"].values())
            added = lat["p50_added_ms"]
            if added["bare"] > 0.05:  # milliseconds: a ratio of two sub-tick figures says nothing
                assert lat["proxy_vs_bare"] == pytest.approx(added["proxy"] / added["bare"], rel=0.02, abs=0.01)
        traces = r["traces"]  # one chain: every call merged into one trace
        assert traces["records"] == 16 and traces["traces"] == 1 and traces["merged"] == 15
        assert traces["peak_rss_mb"] >= traces["rss_after_imports_mb"] > 0
