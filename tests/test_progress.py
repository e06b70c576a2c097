"""A long command's progress where it is written: lines with the bar's figures in a log, a bar on a terminal."""

from __future__ import annotations

import io

from rich.console import Console

from nemo_polar.progress import Steps, waiting


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def log_console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=120), out  # a file: not a terminal


def test_without_a_terminal_each_step_is_a_line_with_its_figures():
    console, out = log_console()
    clock = Clock()
    with Steps(console, "step", 3, every_s=30, clock=clock) as steps:
        clock.now += 65
        steps.update(1, "reward 0.25  logprob err 3.1e-06")
        steps.update(1, "reward 0.25  logprob err 3.1e-06")  # nothing new, and not 30 s since: no line
        clock.now += 5
        steps.update(2, "reward 0.5  logprob err 2.0e-06")
    assert out.getvalue().splitlines() == [
        "step 0/3  00:00:00",
        "step 1/3  reward 0.25  logprob err 3.1e-06  00:01:05",
        "step 2/3  reward 0.5  logprob err 2.0e-06  00:01:10",
    ]


def test_without_a_terminal_a_long_step_still_writes_every_few_seconds():
    console, out = log_console()
    clock = Clock()
    with Steps(console, "sessions", 4, every_s=30, clock=clock) as steps:
        for _ in range(12):  # polled every 10 s, none done for two minutes
            clock.now += 10
            steps.update(0, "running 4")
    lines = out.getvalue().splitlines()
    assert lines == [
        "sessions 0/4  00:00:00",
        "sessions 0/4  running 4  00:00:30",
        "sessions 0/4  running 4  00:01:00",
        "sessions 0/4  running 4  00:01:30",
        "sessions 0/4  running 4  00:02:00",
    ]


def test_on_a_terminal_it_is_a_bar_and_no_lines():
    out = io.StringIO()
    console = Console(file=out, width=120, force_terminal=True, force_interactive=True)
    with Steps(console, "step", 2) as steps:
        steps.update(1, "reward 0.5")
        steps.update(2, "reward 1.0")
    text = out.getvalue()
    assert "\x1b[" in text and "step 2/2" in text and "━" in text  # drawn in place, with its bar
    assert "step 1/2  reward 0.5  00:" not in text


def test_a_wait_without_a_terminal_says_when_it_begins_and_what_it_took():
    console, out = log_console()
    clock = Clock()
    with waiting(console, "starting vLLM", clock=clock):
        clock.now += 61
    assert out.getvalue().splitlines() == ["starting vLLM", "starting vLLM: done in 61 s"]
