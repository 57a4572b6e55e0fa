"""Progress with an estimate of the time left, for anything that can take more than ~10 s.

One small API for loops of known length (training steps, sweep jobs, benchmark rounds,
evaluation windows, calibration passes):

    from powerbench.progress import Progress

    progress = Progress("decode rounds", total=len(rounds))
    for r in rounds:
        run(r)
        progress.step()          # or progress.step(n) / progress.update(done)
    progress.done()

    for item in Progress.iter(items, "calibration"):   # the same, wrapped round an iterable
        ...

Each report is one log line (logger `powerbench.progress`, INFO), e.g.
`decode rounds: 3/9 (33%), 12 s elapsed, ~24 s left`, so it reads the same in a terminal,
a job log and a file. Reports are throttled: the first after `first_s` (quick loops stay
silent) and then at most one every `every_s` seconds; `done()` prints the total time when
anything was reported before. The estimate is elapsed / done x remaining (steps of
similar cost). Standard library only (foundation layer).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

log = logging.getLogger("powerbench.progress")

T = TypeVar("T")


def format_seconds(seconds: float) -> str:
    """12 s, 3 min 05 s, 1 h 02 min."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


class Progress:
    """Counts `done` of `total` steps and reports it with the time left (see module doc).

    `total`: None when unknown (no estimate, just the count). `emit`: where report lines
    go (default: the `powerbench.progress` logger at INFO); `clock`: seconds (tests);
    `started`: when the work began, on `clock` (default: now; e.g. a sweep resumed by
    another process passes the sweep's start in `time.time()` with `clock=time.time`).
    """

    def __init__(self, label: str, total: int | None, *, first_s: float = 5.0,
                 every_s: float = 10.0, emit: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 started: float | None = None) -> None:
        self.label = label
        self.total = total
        self.done_steps = 0
        self.first_s = first_s
        self.every_s = every_s
        self._emit = emit or log.info
        self._clock = clock
        self.start = clock() if started is None else started
        self._last: float | None = None  # time of the last report (None: nothing reported)

    @classmethod
    def iter(cls, items: Iterable[T], label: str, total: int | None = None,
             **kwargs: object) -> Iterator[T]:
        """Yield `items`, one step each (total: len(items) when it has one)."""
        if total is None and hasattr(items, "__len__"):
            total = len(items)  # type: ignore[arg-type]
        progress = cls(label, total, **kwargs)  # type: ignore[arg-type]
        for item in items:
            yield item
            progress.step()
        progress.done()

    @property
    def elapsed(self) -> float:
        return self._clock() - self.start

    def remaining(self) -> float | None:
        """Estimated seconds left (None before the first step or without a total)."""
        if not self.total or not self.done_steps:
            return None
        left = max(self.total - self.done_steps, 0)
        return self.elapsed / self.done_steps * left

    def line(self) -> str:
        """`label: done/total (pct), elapsed, ~left` (what a report prints)."""
        count = (f"{self.done_steps}/{self.total} ({100 * self.done_steps / self.total:.0f}%)"
                 if self.total else f"{self.done_steps}")
        text = f"{self.label}: {count}, {format_seconds(self.elapsed)} elapsed"
        left = self.remaining()
        return text + (f", ~{format_seconds(left)} left" if left is not None else "")

    def step(self, n: int = 1) -> None:
        self.update(self.done_steps + n)

    def update(self, done: int) -> None:
        """Set the count of finished steps; report when it is time to."""
        self.done_steps = done
        now = self._clock()
        due = (now - self.start >= self.first_s if self._last is None
               else now - self._last >= self.every_s)
        if due and (self.total is None or done < self.total):
            self._last = now
            self._emit(self.line())

    def done(self) -> None:
        """The closing line (only when the loop was slow enough to report before)."""
        if self._last is not None:
            self._emit(f"{self.label}: {self.done_steps} done in {format_seconds(self.elapsed)}")
