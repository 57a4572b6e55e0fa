"""powerbench.progress: counts, the time-left estimate and the throttling of reports."""

from __future__ import annotations

from powerbench.progress import Progress, format_seconds


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_progress_reports_done_total_and_an_estimate_of_the_time_left():
    clock, lines = Clock(), []
    progress = Progress("rounds", 4, first_s=5, every_s=10, emit=lines.append, clock=clock)
    clock.now = 1
    progress.step()  # quick so far: silent
    assert lines == []
    clock.now = 6
    progress.step()
    assert lines == ["rounds: 2/4 (50%), 6 s elapsed, ~6 s left"]
    clock.now = 9
    progress.step()  # within every_s of the last report: silent
    assert len(lines) == 1
    clock.now = 12
    progress.step()  # the last step: no "left", the closing line instead
    progress.done()
    assert lines[-1] == "rounds: 4 done in 12 s"


def test_iter_wraps_an_iterable_and_a_quick_loop_stays_silent():
    lines = []
    assert list(Progress.iter(range(3), "quick", emit=lines.append)) == [0, 1, 2]
    assert lines == []


def test_unknown_total_counts_without_an_estimate():
    clock, lines = Clock(), []
    progress = Progress("reads", None, first_s=0, emit=lines.append, clock=clock)
    clock.now = 2
    progress.step(5)
    assert lines == ["reads: 5, 2 s elapsed"]


def test_started_resumes_an_earlier_clock():
    clock, lines = Clock(), []
    clock.now = 100
    progress = Progress("sweep", 10, first_s=0, every_s=0, emit=lines.append, clock=clock,
                        started=40)
    progress.update(3)
    assert lines == ["sweep: 3/10 (30%), 1 min 00 s elapsed, ~2 min 20 s left"]


def test_format_seconds():
    assert [format_seconds(s) for s in (4.4, 65, 3725)] == ["4 s", "1 min 05 s", "1 h 02 min"]
