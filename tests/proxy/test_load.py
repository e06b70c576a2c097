"""A short `polar bench load`: sessions streaming at once through a proxy process, each on its own
kept-alive connection; every answered call has its record and the figures are the ones reported."""

from __future__ import annotations

from nemo_polar.bench.load import run


def test_a_short_load_run_loses_nothing_and_reports_its_figures():
    out = run(sessions=24, seconds=4.0)
    assert out["errors"] == 0, out["error_examples"]
    assert out["calls"] >= 24 and out["lost"] == 0 and out["records"] == out["calls"]
    assert 0 < out["first_call_ms"]["p50"] and 0 < out["keep_alive_ms"]["p50"]
    assert 0 < out["rss_mb"]["start"] and 0 < out["rss_mb"]["end"] <= out["rss_mb"]["peak"] and out["calls_per_s"] > 0
