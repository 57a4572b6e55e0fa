"""What one `powerbench reproduce <name>` target is: a paper figure or table.

How a target runs lives in its experiment yaml (`conf/experiment/<experiment>.yaml`): the
Hydra sweep and system choices under `hydra.sweeper.params`, and a `reproduce:` block with
its title, the extra sweeps no single Cartesian sweep expresses and the overrides of its
reduced `--quick` sweep. What it draws and what it is compared with lives in its module
(powerbench.reproduce.targets.<name>): the figure function and the published numbers.
A target without an experiment (a measured benchmark) names the task it runs instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pandas as pd

from powerbench.figures.runs import FigureOutput


@dataclass(frozen=True)
class Published:
    """One published number and how to read ours from the figure's table.

    calibration: True only for the calibration rows (the paper's headline results the
        simulator may be calibrated against); every other published number is validation.
    tolerance: allowed |ours - published|: relative (0.2 = 20%) unless `absolute`.
    upper_bound: the paper gives a bound ("under 10%"): within when ours <= value.
    scored: False for a row that reads a published number again under another counting
        (shown side by side where the paper is silent on what it counts): the report
        shows it but leaves it out of its counts.
    """

    label: str
    value: float
    ours: Callable[[pd.DataFrame], float]
    source: str  # where in the paper, e.g. "PowerInfer abstract", "Fig. 12 text"
    calibration: bool = False
    tolerance: float = 0.2
    absolute: bool = False
    upper_bound: bool = False
    scored: bool = True

    def error(self, ours: float) -> float:
        """Signed error: ours - published (absolute) or relative to published."""
        return ours - self.value if self.absolute else (ours - self.value) / self.value

    def within(self, ours: float) -> bool:
        if self.upper_bound:
            return ours <= self.value
        return abs(self.error(ours)) <= self.tolerance


@dataclass(frozen=True)
class RunPlan:
    """The `reproduce:` block of an experiment yaml."""

    title: str
    sweeps: tuple[tuple[str, ...], ...] = ((),)  # one `--multirun` each (overrides on top)
    quick: tuple[str, ...] = ()  # extra overrides of the reduced sweep (the first only)
    setup: str = ""  # what the paper ran and how this target differs (report text)


def experiment_file(experiment: str) -> Path:
    from powerbench.config import CONF_DIR

    return Path(CONF_DIR) / "experiment" / f"{experiment}.yaml"


@cache
def run_plan(experiment: str) -> RunPlan:
    """The experiment yaml's `reproduce:` block (read as a file: nothing is composed)."""
    from omegaconf import OmegaConf

    path = experiment_file(experiment)
    block = OmegaConf.to_container(OmegaConf.load(path)).get("reproduce")
    if not isinstance(block, dict) or "title" not in block:
        raise ValueError(f"{path.name}: a reproduction target's experiment needs a "
                         "`reproduce:` block with at least `title` (and optionally `sweeps`, "
                         "`quick`, `setup`)")
    sweeps = tuple(tuple(str(o) for o in s) for s in block.get("sweeps") or [[]])
    return RunPlan(title=str(block["title"]), sweeps=sweeps,
                   quick=tuple(str(o) for o in block.get("quick") or ()),
                   setup=" ".join(str(block.get("setup", "")).split()))


@dataclass(frozen=True)
class Target:
    name: str  # fig10, table6, ...
    figure: Callable[..., FigureOutput]  # figure(tracking_uri=..., out_dir=...) -> FigureOutput
    experiment: str | None = None  # swept with --multirun; None: `command` instead
    # a target without an experiment: the powerbench task it runs, its quick overrides and
    # its title (an experiment's come from its yaml)
    command: tuple[str, ...] = ()
    command_quick: tuple[str, ...] = ()
    command_title: str = ""
    command_setup: str = ""  # what the paper ran and how this target differs (report text)
    published: tuple[Published, ...] = field(default_factory=tuple)
    simulated: bool = True  # False: measured on this machine (the figure says where)
    # the figure's table from a frame of runs as `mlflow.search_runs` returns them (what
    # `published` reads), for runs that come from elsewhere (`powerbench sensitivity`'s
    # re-costed runs: powerbench.tasks.calibration_set)
    table: Callable[[pd.DataFrame], pd.DataFrame] | None = None

    @property
    def plan(self) -> RunPlan:
        if self.experiment is None:
            return RunPlan(self.command_title, ((),), self.command_quick, self.command_setup)
        return run_plan(self.experiment)

    @property
    def title(self) -> str:
        return self.plan.title

    @property
    def sweeps(self) -> tuple[tuple[str, ...], ...]:
        return self.plan.sweeps

    @property
    def quick(self) -> tuple[str, ...]:
        return self.plan.quick


def stat(column: str, how: str = "mean", **where: object) -> Callable[[pd.DataFrame], float]:
    """`table -> float`: mean or max of `column` over the rows matching `where`
    (column=value), NaN (infeasible) rows left out."""

    def ours(table: pd.DataFrame) -> float:
        rows = table
        for key, value in where.items():
            rows = rows[rows[key] == value]
        values = pd.to_numeric(rows[column], errors="coerce").dropna()
        return float(getattr(values, how)()) if len(values) else float("nan")

    ours.__doc__ = f"{how} of {column} where {where or 'every row'}"
    return ours


POWERINFER_PAPER = "PowerInfer paper (arXiv 2312.12456), {}"
PI2_PAPER = "PowerInfer-2 (arXiv 2406.06282), {}"
