"""The reproduction report (<out_dir>/README.md): every target's published numbers beside
ours, generated from the figure CSVs on disk.

`collect()` gathers every target whose runs exist (the ones just run, the others redrawn
from MLflow) and reads each figure's CSV back through its content hash, so a hand-edited
CSV stops the report (powerbench.figures.stamp.HandEditedError); `compare()` evaluates a
target's Published rows on its table; `render()` writes the markdown (itself stamped with
its own content hash): per target the setup, what ran and how long it took, and label,
published value, ours, error, tolerance, within, calibration or validation.
No machine paths and no store locations are written.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from powerbench.figures.stamp import read_stamped_csv, stamp_text
from powerbench.reproduce.target import Published, Target
from powerbench.reproduce.target_runner import Outcome

REPORT = "README.md"


@dataclass(frozen=True)
class Comparison:
    published: Published
    ours: float

    @property
    def measured(self) -> bool:
        """Whether this run's table had a number for the row (NaN: it did not)."""
        return math.isfinite(self.ours)

    @property
    def error(self) -> float:
        return self.published.error(self.ours) if self.measured else math.nan

    @property
    def within(self) -> bool:
        return self.measured and self.published.within(self.ours)


@dataclass
class TargetResult:
    target: Target
    table: pd.DataFrame | None = None  # the figure's table as read back from its CSV
    csv: Path | None = None
    png: Path | None = None
    ran: Outcome | None = None  # this invocation's run of the target
    error: str | None = None
    comparisons: list[Comparison] = field(default_factory=list)
    recorded_seconds: float | None = None  # wall time of its last recorded reproduce run
    hardware: dict[str, str] = field(default_factory=dict)  # profile -> its recorded description


def compare(target: Target, table: pd.DataFrame) -> list[Comparison]:
    """Each Published row with our number read from `table` (NaN where it cannot be)."""
    out = []
    for published in target.published:
        try:
            ours = float(published.ours(table))
        except (KeyError, ValueError, TypeError, IndexError, AttributeError, LookupError):
            ours = math.nan
        out.append(Comparison(published, ours))
    return out


def collect(targets: Iterable[Target], outcomes: Mapping[str, Outcome], tracking_uri: str,
            out_dir: Path) -> list[TargetResult]:
    """A result for every target just run and every other whose runs exist in MLflow;
    HandEditedError when a figure CSV was edited after it was written."""
    results = []
    for target in targets:
        ran = outcomes.get(target.name)
        result = TargetResult(target, ran=ran)
        if ran is not None and ran.ok:
            output = ran.output
        else:
            try:
                output = target.figure(tracking_uri=tracking_uri, out_dir=out_dir)
            except LookupError:  # no runs of it: not in the report (unless it just failed)
                output = None
            except Exception as err:  # noqa: BLE001 - one broken figure must not hide the rest
                output, result.error = None, f"figure failed: {type(err).__name__}: {err}"
        if ran is not None and not ran.ok:
            result.error = ran.error
        if output is None and result.error is None:
            continue
        if output is not None:
            result.table, result.csv, result.png = read_stamped_csv(output.csv), output.csv, \
                output.png
            result.comparisons = compare(target, result.table)
        if ran is None:
            result.recorded_seconds = recorded_wall_time(target, tracking_uri)
        if target.simulated:
            result.hardware = recorded_hardware(target, tracking_uri)
        results.append(result)
    return results


def recorded_wall_time(target: Target, tracking_uri: str) -> float | None:
    """Wall time of the target's latest `reproduce:<name>` record in the store (None: none)."""
    from powerbench.figures.runs import column, search_runs

    try:
        runs = search_runs(target.experiment or target.name, tracking_uri,
                           f"tags.reproduce_target = '{target.name}'")
    except Exception:  # noqa: BLE001 - a store without the record: no time to show
        return None
    if runs.empty:
        return None
    seconds = pd.to_numeric(column(runs.sort_values("start_time"), "metrics.wall_seconds"))
    return float(seconds.iloc[-1]) if seconds.notna().iloc[-1] else None


def recorded_hardware(target: Target, tracking_uri: str) -> dict[str, str]:
    """Each hardware profile the target's runs used -> the description they recorded
    (params hardware.name / hardware.description); empty when the store has none."""
    from powerbench.figures.runs import column, search_runs

    try:
        runs = search_runs(target.experiment or target.name, tracking_uri)
    except Exception:  # noqa: BLE001 - a store without the runs: profiles named only
        return {}
    pairs = zip(column(runs, "params.hardware.name"), column(runs, "params.hardware.description"),
                strict=True)
    return {str(n): str(d) for n, d in pairs if isinstance(n, str) and isinstance(d, str) and d}


def _number(value: float) -> str:
    return "n/a" if not math.isfinite(value) else f"{value:.4g}"


def _error(c: Comparison) -> str:
    if not math.isfinite(c.error):
        return "n/a"
    return f"{c.error:+.3g}" if c.published.absolute else f"{100 * c.error:+.1f}%"


def _within(c: Comparison) -> str:
    """yes / no, or n/a where this run's table has no number for the row (it counts as
    not within)."""
    return "n/a" if not c.measured else "yes" if c.within else "no"


def _tolerance(p: Published) -> str:
    if p.upper_bound:
        return f"at most {p.value:g}"
    return f"±{p.tolerance:g}" if p.absolute else f"±{100 * p.tolerance:g}%"


def provenance(result: TargetResult) -> str:
    """'SIMULATED by the cost model on <profile>' or 'MEASURED on <this machine's CPU>'."""
    table = result.table
    if result.target.simulated:
        names = (sorted({n for h in table["hardware"].dropna().unique()
                         for n in str(h).split("+")})  # "pc_high+a100": systems on two
                 if table is not None and "hardware" in table.columns else [])
        where = "; ".join(f"{n} ({result.hardware[n]})" if n in result.hardware else n
                          for n in names) or "a hardware profile"
        return f"SIMULATED by the cost model on {where}"
    from powerbench.tracking.provenance import machine_tags

    tags = machine_tags()
    return (f"MEASURED on this machine ({tags.get('host_cpu', 'CPU unknown')}, "
            f"GPU: {tags.get('host_gpu', 'unknown')})")


def how_to_run(target: Target) -> str:
    if target.experiment is None:
        return f"`powerbench {' '.join(target.command)}`"
    sweeps = "; ".join(" ".join(s) or "as in the yaml" for s in target.sweeps)
    return (f"`conf/experiment/{target.experiment}.yaml` "
            f"({len(target.sweeps)} sweep(s): {sweeps})")


def _section(result: TargetResult) -> list[str]:
    target = result.target
    lines = [f"## {target.name}: {target.title}", "", f"- {provenance(result)}",
             f"- runs: {how_to_run(target)}"]
    if target.plan.setup:
        lines.append(f"- setup: {target.plan.setup}")
    if result.ran is not None:
        kind = "the reduced `--quick` sweep" if result.ran.quick else "the full sweep"
        lines.append(f"- ran now ({kind}): {result.ran.seconds:.0f} s wall time")
    else:
        lines.append("- not run by this command: redrawn from the runs already in the store"
                     + (f" (their recorded run took {result.recorded_seconds:.0f} s)"
                        if result.recorded_seconds is not None else ""))
    if result.table is not None:
        lines.append(f"- table rows: {len(result.table)}: [{result.csv.name}]({result.csv.name}),"
                     f" [{result.png.name}]({result.png.name})")
    if result.error:
        lines.append(f"- **FAILED**: {result.error.splitlines()[0]}")
    if result.comparisons:
        lines += ["", comparison_table(result.comparisons)]
    elif result.table is not None:
        lines += ["", "No published numbers are compared for this target."]
    return [*lines, ""]


def comparison_table(comparisons: list[Comparison]) -> str:
    lines = ["| published number | paper | ours | error | tolerance | within | kind | source |",
             "|---|---|---|---|---|---|---|---|"]
    for c in comparisons:
        p = c.published
        lines.append(f"| {p.label} | {p.value:g} | {_number(c.ours)} | {_error(c)} | "
                     f"{_tolerance(p)} | {_within(c)} | "
                     f"{_kind(p)} | {p.source} |")
    return "\n".join(lines)


def _kind(p: Published) -> str:
    if not p.scored:
        return "not scored (another counting)"
    return "calibration" if p.calibration else "validation"


def _status(result: TargetResult) -> str:
    if result.error:
        return "FAILED"
    if result.ran is None:
        return "earlier runs"
    return "ran now (quick)" if result.ran.quick else "ran now"


def _seconds(result: TargetResult) -> str:
    if result.ran is not None:
        return f"{result.ran.seconds:.0f}"
    return f"{result.recorded_seconds:.0f} (recorded)" if result.recorded_seconds else "-"


def render(results: list[TargetResult], command: str, now: datetime | None = None,
           machine: str | None = None) -> str:
    """The markdown report (without its stamp line)."""
    date = (now or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC")
    scored = [c for r in results for c in r.comparisons if c.published.scored]
    within, total = sum(c.within for c in scored), len(scored)
    calib = [c for c in scored if c.published.calibration]
    wall = sum(r.ran.seconds if r.ran is not None else (r.recorded_seconds or 0.0)
               for r in results)
    lines = [
        "# Paper reproduction: published numbers vs ours", "",
        f"Generated by `{command}` on {date}"
        + (f" ({machine})" if machine else "") + ". Every CSV, figure and this page "
        "are written by that command; the CSVs and this page carry a content hash in their "
        "first line and the report generator refuses an edited CSV.",
        "SIMULATED numbers come from powerbench's cost model (powerbench.simulator) on a "
        "hardware profile of the paper's machines, not from running on that hardware; "
        "MEASURED numbers were taken on the machine named. Calibration rows are the papers' "
        "headline numbers the cost model may be calibrated against; validation rows are not.",
        "", f"{within} of {total} published numbers within tolerance "
        f"({sum(c.within for c in calib)} of {len(calib)} calibration rows). "
        f"Wall time of the targets shown (run now or as recorded): {wall / 60:.1f} min.", "",
        "| target | status | wall time (s) | table rows | within tolerance |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        counted = [c for c in r.comparisons if c.published.scored]
        rows = len(r.table) if r.table is not None else 0
        lines.append(f"| {r.target.name} | {_status(r)} | {_seconds(r)} | {rows} | "
                     f"{sum(c.within for c in counted)} of {len(counted)} |")
    lines.append("")
    for r in results:
        lines += _section(r)
    return "\n".join(lines)


def write_report(path: Path, results: list[TargetResult], command: str,
                 machine: str | None = None) -> Path:
    """<path> (README.md): the report behind its content-hash line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(stamp_text(render(results, command, machine=machine), "<!--", " -->"))
    return path
