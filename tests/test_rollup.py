"""Per-session rollups: calls, tokens, trained tokens, time waiting on the model against time in tools."""

from __future__ import annotations

from nemo_polar.records import CompletionRecord, UpstreamInfo
from nemo_polar.rollup import COLUMNS, Rollup, busy_and_idle, cells, kept, rollup, total, view

UP = UpstreamInfo(engine="vllm", url="http://u", model="m")


def call(seq: int, start: float, end: float, prompt: int = 3, sample: int = 2, status: str = "ok", **kw):
    return CompletionRecord(
        id=f"r{seq}",
        session_id="s",
        seq=seq,
        started_at=start,
        finished_at=end,
        dialect="openai_chat",
        stream=False,
        native_request={},
        prompt_token_ids=list(range(prompt)),
        completion_token_ids=list(range(sample)),
        completion_logprobs=[-0.1] * sample,
        upstream=UP,
        status=status,
        **kw,
    )


def test_busy_counts_overlapping_calls_once_and_idle_is_the_gaps_between_them():
    # 0-2 and 1-3 overlap (a sub-agent's call inside the main agent's), 5-6 after a 2 s tool
    assert busy_and_idle([(5, 6), (0, 2), (1, 3)]) == (4, 2)
    assert busy_and_idle([(0, 4), (1, 2)]) == (4, 0)  # one call inside another
    assert busy_and_idle([]) == (0.0, 0.0)


def test_a_sessions_rollup_sums_its_calls_failed_ones_included():
    records = [
        call(0, 10.0, 11.5, prompt=100, sample=20),
        call(1, 12.0, 13.0, prompt=130, sample=10),
        call(2, 13.5, 14.0, prompt=0, sample=0, status="upstream_error", usage={"prompt_tokens": 140}),
    ]
    r = rollup(records, trained_tokens=30)
    assert r == Rollup(
        calls=3,
        calls_by_status={"ok": 2, "upstream_error": 1},
        prompt_tokens=370,  # a failed call's prompt from its usage
        completion_tokens=30,
        trained_tokens=30,
        model_s=3.0,
        tools_s=1.0,
    )


def test_view_puts_the_stage_times_beside_it_and_derives_the_harness_time():
    r = rollup([call(0, 0.0, 2.0), call(1, 3.0, 4.0)])
    shown = view(r, {"queued_s": 0.1, "init_s": 0.5, "ready_wait_s": 0.0, "run_s": 6.0, "postrun_s": 0.3})
    assert shown["stages"]["run_s"] == 6.0 and shown["model_s"] == 3.0 and shown["tools_s"] == 1.0
    assert shown["harness_s"] == 2.0  # RUN less the model and the tools: the harness starting and exiting
    assert view(None, None)["harness_s"] is None and view(None, None)["stages"]["run_s"] == 0.0


def test_totals_over_sessions():
    a, b = rollup([call(0, 0, 1)], 2).model_dump(), rollup([call(0, 0, 2, prompt=5)], 1).model_dump()
    t = total([a, b])
    assert t["sessions"] == 2 and t["calls"] == 2 and t["prompt_tokens"] == 8 and t["model_s"] == 3.0


def test_cells_as_polar_status_prints_them():
    r = rollup([call(0, 0.0, 2.0, prompt=1200), call(1, 3.0, 4.0)], trained_tokens=4).model_dump()
    timing = {"init_s": 0.25, "run_s": 6.0}
    assert cells({"rollup": r, "timing": timing}) == [
        "2", "1,203", "4", "4", "3.00", "1.00", "2.00", "0.25", "6.00"
    ]  # fmt: skip
    assert cells(None) == ["-"] * len(COLUMNS)  # a session still running
    assert len(cells({"timing": timing})) == len(COLUMNS)


def test_a_result_from_before_rollups_shows_what_its_build_stats_say():
    old = {"stats": {"records": 3, "trained_tokens": 40}, "timing": {"run_s": 2.0}}
    assert kept(old) == {"calls": 3, "trained_tokens": 40}
    assert cells(old)[:4] == ["3", "-", "-", "40"]
    assert kept({"stats": {}}) is None and kept({"rollup": {"calls": 1}}) == {"calls": 1}
