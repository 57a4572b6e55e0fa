"""What one `powerbench reproduce <name>` target is: a paper figure or table.

A target names the Hydra experiment it sweeps (`conf/experiment/<experiment>.yaml`, run
with `--multirun` through the parallel launcher) or the task it runs, the figure function
that reads the runs back from MLflow, the overrides of its reduced `--quick` sweep, and the
published values it is compared with in results/reproduction.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from powerbench.figures.runs import FigureOutput


@dataclass(frozen=True)
class Published:
    """One published number and how to read ours from the figure's table.

    calibration: True only for issue 15's calibration rows (the paper's headline results the
        simulator may be calibrated against); every other published number is validation.
    tolerance: allowed |ours - published|: relative (0.2 = 20%) unless `absolute`.
    """

    label: str
    value: float
    ours: Callable[[pd.DataFrame], float]
    source: str  # where in the paper, e.g. "PowerInfer abstract", "Fig. 12 text"
    calibration: bool = False
    tolerance: float = 0.2
    absolute: bool = False

    def error(self, ours: float) -> float:
        """Signed error: ours - published (absolute) or relative to published."""
        return ours - self.value if self.absolute else (ours - self.value) / self.value

    def within(self, ours: float) -> bool:
        return abs(self.error(ours)) <= self.tolerance


@dataclass(frozen=True)
class Target:
    name: str  # fig10, table6, ...
    title: str
    figure: Callable[..., FigureOutput]  # figure(tracking_uri=..., out_dir=...) -> FigureOutput
    experiment: str | None = None  # swept with --multirun; None: `command` instead
    command: tuple[str, ...] = ()  # a powerbench task and its overrides, e.g. ("bench-operators",)
    quick: tuple[str, ...] = ()  # extra overrides of the reduced sweep (`--quick`)
    # override sets, one `--multirun experiment=<experiment>` each, all logged to its MLflow
    # experiment (for combinations no single Cartesian sweep expresses, e.g. per-PC model
    # lists); `--quick` runs only the first, with `quick` applied after it
    sweeps: tuple[tuple[str, ...], ...] = ((),)
    published: tuple[Published, ...] = field(default_factory=tuple)
    simulated: bool = True  # False: measured on this machine (the figure says where)
    # the figure's table from a frame of runs as `mlflow.search_runs` returns them (what
    # `published` reads), for runs that come from elsewhere (experiments/fit_efficiency.py)
    table: Callable[[pd.DataFrame], pd.DataFrame] | None = None
