"""`polar bench view`, small: the page's times on a generated run, in headless chromium, with no console error."""

from __future__ import annotations

import pytest

from nemo_polar.bench.view import run
from nemo_polar.view.browser import missing


@pytest.mark.skipif(missing() is not None, reason=str(missing()))
def test_bench_view_measures_the_list_and_a_long_trace():
    result = run(calls=120, trace_tokens=6000, per_session=10, repeats=1)
    assert result["calls"] == 120 and result["sessions"] == 1 + 8  # the long session and 80 calls in 8
    assert result["console_errors"] == []
    for key in ("list_first_render_ms", "list_rollups_ms", "session_render_ms", "trace_first_render_ms"):
        assert 0 < result[key] < 60_000, (key, result)
    assert result["trace_complete_ms"] >= 0
