"""A long command's progress, readable where it is written: a bar on an interactive terminal, and elsewhere (a
log file, a pipe, CI) one line each time a step ends, or every `every_s` seconds while none does, with the
figures the bar shows (steps done of all, the status, the time so far). `waiting` is the same for a wait
with no steps (a server starting): a spinner, or a line when it begins and one when it ends.

Part of the shared layer: it imports rich only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

EVERY_S = 30.0  # without a terminal: a line at least this often while a step runs


class Steps:
    """`with Steps(console, "step", total) as steps: steps.update(done, "reward 0.5")`."""

    def __init__(
        self,
        console: Console,
        unit: str,
        total: int,
        every_s: float = EVERY_S,
        transient: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.console, self.unit, self.total, self.every_s, self.clock = console, unit, total, every_s, clock
        self.done, self.status, self.written_done = 0, "", -1
        self.bar: Progress | None = None
        if console.is_interactive:
            columns = (TextColumn(f"{unit} {{task.completed}}/{{task.total}}"), BarColumn())
            self.bar = Progress(
                *columns, TextColumn("{task.description}"), TimeElapsedColumn(), console=console, transient=transient
            )

    def __enter__(self) -> Steps:
        self.started = self.written = self.clock()
        if self.bar is not None:
            self.bar.__enter__()
            self.task = self.bar.add_task("", total=self.total)
        else:
            self._line()
        return self

    def update(self, done: int, status: str = "") -> None:
        """`done` steps of `total` so far; `status` the figures beside them (the bar's description)."""
        self.done, self.status = done, status
        if self.bar is not None:
            self.bar.update(self.task, completed=done, description=status)
        elif done != self.written_done or self.clock() - self.written >= self.every_s:
            self._line()

    def _line(self) -> None:
        self.written, self.written_done = self.clock(), self.done
        elapsed = time.strftime("%H:%M:%S", time.gmtime(self.written - self.started))
        status = f"  {self.status}" if self.status else ""
        self.console.print(f"{self.unit} {self.done}/{self.total}{status}  {elapsed}", markup=False, highlight=False)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)  # type: ignore[arg-type]


@contextmanager
def waiting(console: Console, what: str, clock: Callable[[], float] = time.monotonic) -> Iterator[None]:
    """A wait with no steps: a spinner on a terminal; elsewhere `what` when it begins and the time it took after."""
    if console.is_interactive:
        with console.status(what):
            yield
        return
    console.print(what, markup=False, highlight=False)
    started = clock()
    yield
    console.print(f"{what}: done in {clock() - started:.0f} s", markup=False, highlight=False)
