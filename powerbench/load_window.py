"""The load average and UTC time around a measurement: every timed number carries them.

A foundation module (it imports nothing of powerbench), so that measuring code at any
layer, from the operator benchmark up to the measurement harness, records them one way.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any


def load_average() -> float:
    """The 1-minute load average, rounded; NaN where the OS has none."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return math.nan


def utc_now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())


@dataclass
class LoadWindow:
    """Load average (1 min) and UTC time around a measurement (`with LoadWindow() as w`)."""

    started: str = ""
    ended: str = ""
    load_before: float = math.nan
    load_after: float = math.nan
    seconds: float = 0.0
    _t0: float = field(default=0.0, repr=False)

    def __enter__(self) -> LoadWindow:
        self.started, self.load_before = utc_now(), load_average()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = round(time.perf_counter() - self._t0, 1)
        self.ended, self.load_after = utc_now(), load_average()

    def line(self) -> str:
        return (f"{self.started} -> {self.ended[11:]} ({self.seconds:.0f} s), load average "
                f"{self.load_before:.2f} -> {self.load_after:.2f}")

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if not k.startswith("_")}
