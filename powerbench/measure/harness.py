"""The one measurement harness: every benchmark task measures and reports through it.

A benchmark measures variants (engines, operators, solvers ...) in interleaved rounds
(every variant once per round, so that drifting load from other processes hits all of them
alike; each round in its own seeded random order, so that no variant always follows the same
one),
turns them into the rows of one table, and reports. The harness owns everything around
the measuring, the same way for every benchmark:

- `MachineFacts.probe()`: CPU model, usable cores, best SIMD ISA, memory, torch version.
- `LoadWindow`: the load average and UTC time before and after the measurement.
- `interleaved(variants, rounds)`: the rounds, with progress and the time left
  (`round_orders`: each round's seeded random order).
- `Report`: the rows -> one printed table, one CSV, one JSON (machine, load, params,
  notes) in the run's own directory, and one MLflow run named after the study whose
  metrics are `<row key>.<column>` (`metric_name`).
- `publish=True` also copies the report into `results/<study>/` with a generated page
  (`<report>.md`: date, machine, the command that made it, the table) and the study's
  index (`README.md`); nothing is written into `results/` otherwise.
- `finished_before` / `mark_finished`: a benchmark job whose resolved config finished
  before, measured with the same package sources, is skipped, as `powerbench run` skips
  finished jobs (`rerun=true` runs it again); a change to the sources measures it again.
"""

from __future__ import annotations

import json
import math
import platform
import random
import re
import shlex
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from powerbench.hardware.facts import cpu_model, meminfo, usable_cpus
from powerbench.load_window import LoadWindow
from powerbench.progress import Progress

T = TypeVar("T")

ISA_FLAGS = (("avx512", ("avx512f", "avx512bw", "avx512vl")), ("avx2", ("avx2", "fma", "f16c")))


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def best_isa(flags: Iterable[str] | None = None) -> str:
    """The widest SIMD level the CPU offers: avx512, avx2 or portable."""
    have = cpu_flags() if flags is None else set(flags)
    for name, needed in ISA_FLAGS:
        if all(flag in have for flag in needed):
            return name
    return "portable"


@dataclass(frozen=True)
class MachineFacts:
    """What a measured number was measured on."""

    cpu_model: str
    cpus: int  # usable by this process
    isa: str  # best SIMD level of the CPU (a benchmark records the path it used itself)
    memory_gb: float
    system: str
    python: str
    torch: str
    gpu: str = ""  # the CUDA device torch sees ("" without one)

    @classmethod
    def probe(cls) -> MachineFacts:
        try:
            import torch

            torch_version = torch.__version__
            gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else ""
        except ImportError:  # the harness itself needs no torch
            torch_version, gpu = "none", ""
        return cls(cpu_model=cpu_model(), cpus=usable_cpus(), isa=best_isa(),
                   memory_gb=round(meminfo().get("MemTotal", 0) / 2**30, 1),
                   system=f"{platform.system()} {platform.release()}",
                   python=platform.python_version(), torch=torch_version, gpu=gpu)

    def line(self) -> str:
        return (f"{self.cpu_model}, {self.cpus} CPU(s), {self.isa}, {self.memory_gb:g} GiB, "
                + (f"{self.gpu}, " if self.gpu else "") + f"torch {self.torch}")


def round_orders(names: Sequence[str], rounds: int, seed: int = 0) -> Iterator[list[str]]:
    """The order of each of `rounds` rounds: all of `names`, each round drawn afresh at
    random (seeded: reproducible).

    As in the operator benchmark's Timer: a call's speed can depend on the call before it
    (the cache and prefetcher state it leaves), and a fixed or merely rotated order gives
    every variant the same predecessor in most rounds (A B C, B C A, C A B: B always follows
    A), so that effect would not average out over the rounds."""
    order = random.Random(seed)
    for _ in range(rounds):
        yield order.sample(list(names), len(names))


def interleaved(variants: Mapping[str, Callable[[], T]], rounds: int, warmup: int = 0,
                log: Callable[[str], None] | None = print) -> dict[str, list[T]]:
    """`warmup` untimed calls of each variant, then `rounds` rounds that run every variant
    once, each round in its own random order (`round_orders`); each variant's results in
    round order. Progress with the time left goes to `log` (None: silent)."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1 (got {rounds})")
    names = list(variants)
    for name in names:
        for _ in range(warmup):
            variants[name]()
    results: dict[str, list[T]] = {name: [] for name in names}
    progress = Progress("rounds", rounds, first_s=0.0, every_s=0.0, emit=log) if log else None
    for order in round_orders(names, rounds):
        for name in order:
            results[name].append(variants[name]())
        if progress is not None:
            progress.step()
    return results


def metric_key(text: str) -> str:
    """A row key or column as an MLflow metric name part: [A-Za-z0-9_.-] only."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(text)).strip("_") or "_"


@dataclass
class Report:
    """One benchmark's result: its table and everything a reader needs to trust it.

    `study` names the results folder and the MLflow run; `name` the files (one study can
    hold several reports, e.g. decode/realsize_opt_6_7b); `key` the columns that name a
    row; `metrics` the numeric columns logged as MLflow metrics (all numeric ones when
    empty). `columns` picks and orders the printed table's columns (all when empty).
    """

    study: str
    name: str
    rows: list[dict[str, Any]]
    key: Sequence[str]
    title: str = ""
    metrics: Sequence[str] = ()
    columns: Sequence[str] = ()
    notes: list[str] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    machine: MachineFacts | None = None
    load: LoadWindow | None = None
    command: str = ""
    measured: bool = True  # False: simulated or computed (solver timings count as measured)
    extra_files: list[Path] = field(default_factory=list)  # e.g. a plot, copied alongside
    # every row also carries the run's `started` (UTC) and `load_avg_1m_before/after`, for
    # tables that gather the rows of several runs (e.g. a page listing each configuration)
    window_columns: bool = False
    # "module.function" drawing the table, f(frame, png_path): `finish` draws <name>.png
    # beside the CSV (and a sweep's collected report draws it again from all the rows)
    figure: str = ""

    def row_key(self, row: Mapping[str, Any]) -> str:
        return ".".join(metric_key(row[k]) for k in self.key)

    def metric_dict(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for row in self.rows:
            for column, value in row.items():
                if column in self.key or (self.metrics and column not in self.metrics):
                    continue
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    continue
                if math.isfinite(value):
                    out[f"{self.row_key(row)}.{metric_key(column)}"] = float(value)
        return out

    def table(self) -> str:
        columns = list(self.columns) or list(dict.fromkeys(c for r in self.rows for c in r))
        cells = [[_cell(row.get(c)) for c in columns] for row in self.rows]
        widths = [max([len(c)] + [len(line[i]) for line in cells]) for i, c in enumerate(columns)]
        lines = ["  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True)),
                 "  ".join("-" * w for w in widths)]
        lines += ["  ".join(v.rjust(w) for v, w in zip(line, widths, strict=True))
                  for line in cells]
        return "\n".join(lines)

    def header(self) -> list[str]:
        lines = [self.title or self.name]
        if self.machine is not None:
            where = "measured on this machine" if self.measured else "simulated, computed on"
            lines.append(f"{where}: {self.machine.line()}")
        if self.load is not None:
            lines.append(f"when: {self.load.line()}")
        if self.command:
            lines.append(f"command: {self.command}")
        return lines

    def text(self) -> str:
        return "\n".join(self.header() + ["", self.table()] +
                         ([""] + self.notes if self.notes else []))

    def write(self, out_dir: Path) -> list[Path]:
        """<name>.csv, <name>.json and <name>.txt in `out_dir` (the run's own directory)."""
        import pandas as pd

        out_dir.mkdir(parents=True, exist_ok=True)
        csv, meta, txt = (out_dir / f"{self.name}.{ext}" for ext in ("csv", "json", "txt"))
        pd.DataFrame(self.rows).to_csv(csv, index=False)
        meta.write_text(json.dumps({
            "study": self.study, "name": self.name, "title": self.title,
            "measured": self.measured, "command": self.command, "params": self.params,
            "key": list(self.key), "columns": list(self.columns), "metrics": list(self.metrics),
            "figure": self.figure,
            "machine": asdict(self.machine) if self.machine else None,
            "load": self.load.as_dict() if self.load else None, "notes": self.notes},
            indent=1, default=str))
        txt.write_text(self.text() + "\n")
        return [csv, meta, txt]


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "-"
        return f"{value:.4g}" if abs(value) < 1e5 else f"{value:.3e}"
    return str(value)


def command_line(argv: Sequence[str] | None = None) -> str:
    """The `powerbench ...` command that made this run (no machine paths)."""
    args = [a for a in (sys.argv[1:] if argv is None else argv) if not _is_path_like(a)]
    tasks = [a for a in args if a.startswith("task=")]  # the CLI's `<task>` form, as typed
    if tasks:
        args.remove(tasks[0])
        args.insert(0, tasks[0].split("=", 1)[1].replace("_", "-"))
    return "powerbench " + " ".join(shlex.quote(a) for a in args)


def _is_path_like(arg: str) -> bool:
    """An override whose value is an absolute path (run dir, cache, store): machine-specific."""
    value = arg.split("=", 1)[-1]
    return value.startswith("/") or "sqlite:////" in value


def log_report(report: Report, tracking: Any, files: Sequence[Path],
               tags: Mapping[str, str] | None = None) -> Any:
    """One MLflow run named after the report: params, metrics, artifacts. Returns the
    tracker (its run id, whether it is enabled or offline)."""
    from powerbench.build import build

    tracker = build(tracking)
    kind = {"measured": "true"} if report.measured else {"simulated": "true"}
    with tracker.run(f"{report.study}-{report.name}",
                     tags={**kind, "powerbench.study": report.study, **(tags or {})}):
        tracker.log_params({**report.params,
                            "machine": asdict(report.machine) if report.machine else {},
                            "load": report.load.as_dict() if report.load else {}})
        tracker.log_metrics(report.metric_dict())
        for path in list(files) + list(report.extra_files):
            tracker.log_artifact(path)
    return tracker


def finish(report: Report, out_dir: Path, tracking: Any = None, publish_to: Path | None = None,
           tags: Mapping[str, str] | None = None) -> list[Path]:
    """Print the table, write the files (before anything that can fail), log the MLflow
    run, and publish into `publish_to/<study>/` when given. Returns the files written."""
    if report.machine is None:
        report.machine = MachineFacts.probe()
    if not report.command:
        report.command = command_line()
    if report.window_columns and report.load is not None:
        for row in report.rows:
            row.update(started=report.load.started, load_avg_1m_before=report.load.load_before,
                       load_avg_1m_after=report.load.load_after)
    print("\n" + report.text(), flush=True)
    files = report.write(out_dir)
    print(f"\n-> {out_dir / report.name}.csv (.json, .txt)")
    if report.figure:
        report.extra_files.append(draw_figure(report, out_dir / f"{report.name}.png"))
    if publish_to is not None:
        from powerbench.measure.publish import publish

        published = publish(report, publish_to, files)
        print(f"-> published {', '.join(str(p) for p in published)}")
    if tracking is not None:
        tracker = log_report(report, tracking, files, tags)
        if tracker.enabled and tracker.run_id:
            print(f"MLflow run {tracker.run_id} in experiment '{tracker.experiment}'")
    return files


def draw_figure(report: Report, png: Path) -> Path:
    """`report.figure` (a dotted path to f(frame, png_path)) drawn from its rows."""
    import pandas as pd
    from hydra.utils import get_method

    get_method(report.figure)(pd.DataFrame(report.rows), png)
    return png


def finished_before(cfg: Any) -> str | None:
    """Where a finished earlier run of this exact job, measured with the same sources,
    left its results (None: run it). A measurement of other code is not reused."""
    if getattr(cfg, "rerun", False):
        return None
    from powerbench.tracking.jobs import JobLedger
    from powerbench.tracking.provenance import sources_fingerprint

    done = JobLedger(cfg).finished_locally()
    if done is None:
        return None
    if done.get("sources") != sources_fingerprint():
        print(f"measuring again: job {done['job_id']} finished before ({done['metrics']}) "
              "with other sources of the package")
        return None
    return done["metrics"]


def mark_finished(cfg: Any, result_file: Path, run_id: str | None = None) -> None:
    from powerbench.tracking.jobs import JobLedger
    from powerbench.tracking.provenance import sources_fingerprint

    JobLedger(cfg).mark_finished(result_file.parent, run_id, result_file.name,
                                 sources=sources_fingerprint())


def run_benchmark(cfg: Any, out_dir: Path, measure: Callable[[], Report | list[Report]],
                  publish_results: bool = False) -> list[Report]:
    """A benchmark task's whole life: skip it if this exact job finished before, measure
    inside a load window, then `finish` every report (results/<study>/ when
    `publish_results`). `measure` returns the report(s) without machine or load."""
    from powerbench.paths import results_dir
    from powerbench.tracking.jobs import sweep_marker

    done = finished_before(cfg)
    if done:
        print(f"skipped: this job finished before ({done}); rerun=true (or --force) "
              "measures it again")
        copy_reports(Path(done).parent, Path(out_dir))
        sweep_marker("skipped")
        return []
    machine = MachineFacts.probe()
    print(f"machine: {machine.line()}", flush=True)
    with LoadWindow() as load:
        made = measure()
    reports = made if isinstance(made, list) else [made]
    files: list[Path] = []
    for report in reports:
        report.machine, report.load = machine, load
        files += finish(report, Path(out_dir), getattr(cfg, "tracking", None),
                        results_dir() if publish_results else None)
    mark_finished(cfg, next(p for p in files if p.suffix == ".json"))
    sweep_marker("finished")
    return reports


def copy_reports(earlier: Path, out_dir: Path) -> None:
    """A skipped job's directory gets the earlier run's report files (<name>.csv/.json/.txt
    and extra files beside them), so that a sweep's collected table stays complete."""
    import shutil

    if earlier.resolve() == out_dir.resolve() or not earlier.is_dir():
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    for path in earlier.iterdir():
        if path.is_file() and path.suffix in (".csv", ".json", ".txt", ".png"):
            shutil.copyfile(path, out_dir / path.name)
