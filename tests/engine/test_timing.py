"""Throughput/latency summary from per-step timings."""

from __future__ import annotations

import pytest

from powerbench.engine.timing import METRIC_NAMES, RunTiming, StepClock, measure, summarize


def test_summary_uses_medians_and_excludes_prefill_from_decode():
    runs = [RunTiming(0.5, [0.1] * 4), RunTiming(0.2, [0.05] * 4), RunTiming(0.3, [0.2] * 4)]
    m = summarize(runs, batch=2, prompt_tokens=30)
    assert set(m) == set(METRIC_NAMES)
    assert m["prefill_tokens_per_s"] == pytest.approx(30 * 2 / 0.3)
    assert m["decode_tokens_per_s"] == pytest.approx(4 * 2 / 0.4)  # median decode: 0.4 s
    assert m["decode_latency_ms_p50"] == pytest.approx(100.0)
    assert m["decode_latency_ms_p90"] == pytest.approx(200.0)


def test_clock_splits_prefill_and_steps():
    clock = StepClock("cpu")
    clock.start()
    for _ in range(4):
        clock.mark()
    t = clock.timing()
    assert len(t.step_s) == 3 and t.prefill_s >= 0 and all(s >= 0 for s in t.step_s)


def test_measure_discards_warmup_runs():
    calls = []

    def once():
        calls.append(1)
        return RunTiming(float(len(calls)), [1.0]), len(calls)

    runs, last = measure(once, warmup=2, repeats=3)
    assert [r.prefill_s for r in runs] == [3.0, 4.0, 5.0] and last == 5
