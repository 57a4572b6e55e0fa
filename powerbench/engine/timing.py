"""Timing: per-step timestamps, warm-up + repeats, and the throughput/latency summary.

Definitions (shared by every engine so their numbers compare):
- a run generates N = `new_tokens` tokens for B rows from P = `prompt_tokens` tokens;
- prefill = from the start of the run until the first new token's logits exist (the
  whole prompt through the model); `prefill_tokens_per_s` = P x B / prefill time;
- decode = the N - 1 following single-token steps (each one forward + token choice);
  `decode_tokens_per_s` = (N - 1) x B / decode time; prefill is excluded;
- `decode_latency_ms_p50/p90`: percentiles of the per-step times, pooled over the
  timed repeats; throughputs use the median over repeats.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import torch

T = TypeVar("T")

METRIC_NAMES = (
    "prefill_tokens_per_s",
    "decode_tokens_per_s",
    "decode_latency_ms_p50",
    "decode_latency_ms_p90",
    "prefill_ms",
    "decode_ms",
)


def synchronize(device: torch.device | str) -> None:
    """Wait for queued kernels, so wall-clock stamps mean something on accelerators."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class StepClock:
    """Timestamps one generation: `start()`, then `mark()` once per new token.

    The first mark ends prefill; each later mark ends one decode step.
    """

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)
        self.stamps: list[float] = []

    def start(self) -> None:
        synchronize(self.device)
        self.stamps = [time.perf_counter()]

    def mark(self) -> None:
        synchronize(self.device)
        self.stamps.append(time.perf_counter())

    def timing(self) -> RunTiming:
        if len(self.stamps) < 2:
            raise RuntimeError("StepClock: no token was marked")
        steps = [b - a for a, b in zip(self.stamps[1:], self.stamps[2:], strict=False)]
        return RunTiming(prefill_s=self.stamps[1] - self.stamps[0], step_s=steps)


@dataclass
class RunTiming:
    prefill_s: float
    step_s: list[float] = field(default_factory=list)  # one per decode step

    @property
    def decode_s(self) -> float:
        return sum(self.step_s)


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100]."""
    if not values:
        return float("nan")
    return float(torch.quantile(torch.tensor(values, dtype=torch.float64), q / 100.0))


def summarize(runs: list[RunTiming], batch: int, prompt_tokens: int) -> dict[str, float]:
    """The metrics dict (names in METRIC_NAMES) from the timed runs."""
    if not runs:
        raise ValueError("no timed runs")
    prefill = statistics.median(r.prefill_s for r in runs)
    decode = statistics.median(r.decode_s for r in runs)
    n_steps = len(runs[0].step_s)
    steps_ms = [s * 1e3 for r in runs for s in r.step_s]
    return {
        "prefill_tokens_per_s": prompt_tokens * batch / prefill,
        "decode_tokens_per_s": n_steps * batch / decode if n_steps and decode > 0 else 0.0,
        "decode_latency_ms_p50": percentile(steps_ms, 50),
        "decode_latency_ms_p90": percentile(steps_ms, 90),
        "prefill_ms": prefill * 1e3,
        "decode_ms": decode * 1e3,
    }


def measure(run_once: Callable[[], tuple[RunTiming, T]], warmup: int,
            repeats: int) -> tuple[list[RunTiming], T]:
    """`warmup` discarded runs, then `repeats` timed ones; returns timings + last output."""
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    for _ in range(warmup):
        run_once()
    runs = []
    for _ in range(repeats):
        timing, out = run_once()
        runs.append(timing)
    return runs, out
