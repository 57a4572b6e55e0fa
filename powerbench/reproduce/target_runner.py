"""Run reproduction targets: each one's sweep(s) or command in a child `powerbench`, then
its figure from MLflow (`run_target`; several, simulated ones concurrently: `run_targets`;
the child argument lists: `commands`).

A target with an `experiment` runs `python -m powerbench.cli --multirun
experiment=<experiment> hydra/launcher=parallel ...` once per entry of `target.sweeps`
(`--quick`: the first only, with `target.quick` after it); a target with a `command` runs
`python -m powerbench.cli <command...>`. The child gets the parent's tracking store and
cache (and `rerun=true` with `--force`), writes its output to <work_dir>/<name>.log, and
imports the same powerbench as the parent. The figure is written as soon as the runs exist.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import powerbench
from powerbench.figures.runs import FigureOutput
from powerbench.reproduce.target import Target

LOG_TAIL_LINES = 25


@dataclass(frozen=True)
class RunOptions:
    tracking_uri: str  # resolved store the children log to and the figure reads
    out_dir: Path  # figures, CSVs and the report (README.md)
    work_dir: Path  # the children's sweep/run directories and logs
    cache_dir: str | None = None  # passed to the children (None: their default)
    n_jobs: int = 2  # parallel jobs of a sweep
    parallel_targets: int = 1  # simulated targets whose children run at once (run_targets)
    quick: bool = False
    rerun: bool = False  # run jobs that finished before (`--force`)


@dataclass
class Outcome:
    name: str
    seconds: float
    output: FigureOutput | None = None
    error: str | None = None
    log: Path | None = None
    quick: bool = False  # the reduced `--quick` sweep

    @property
    def ok(self) -> bool:
        return self.error is None and self.output is not None


def _common(opts: RunOptions) -> list[str]:
    args = [f"tracking.uri={opts.tracking_uri}"]
    if opts.cache_dir:
        args.append(f"cache_dir={opts.cache_dir}")
    if opts.rerun:
        args.append("rerun=true")
    return args


def commands(target: Target, opts: RunOptions) -> list[list[str]]:
    """The child `powerbench` argument lists of `target` (without the interpreter)."""
    quick = list(target.quick) if opts.quick else []
    base = opts.work_dir / target.name
    if target.experiment is None:
        if not target.command:
            raise ValueError(f"target {target.name!r} has neither an experiment nor a command")
        return [[*target.command, *_common(opts), f"hydra.run.dir={base / 'run'}",
                 f"hydra.sweep.dir={base / 'sweep'}", *quick]]
    sweeps = target.sweeps[:1] if opts.quick else target.sweeps
    # one job at a time runs in the sweep's own process (no worker processes to start)
    launcher = (["hydra/launcher=parallel", f"hydra.launcher.n_jobs={opts.n_jobs}"]
                if opts.n_jobs > 1 else ["hydra/launcher=basic"])
    return [["--multirun", f"experiment={target.experiment}", *launcher, *_common(opts),
             f"hydra.sweep.dir={base / f'sweep{i}'}", *sweep, *quick]
            for i, sweep in enumerate(sweeps)]


def _child_env() -> dict[str, str]:
    """The parent's environment, with this powerbench first on the child's import path."""
    env = dict(os.environ)
    root = str(Path(powerbench.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    text = path.read_text(errors="replace").splitlines()
    return "\n".join(text[-lines:])


class _Children:
    """The running child processes, so that an interrupt (Ctrl-C, SIGTERM) reaching the
    parent ends them (SIGTERM: each ends its run KILLED) and no new one starts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen] = set()
        self._stopped = False

    def run(self, argv: list[str], out: TextIO) -> int:
        with self._lock:
            if self._stopped:
                return -signal.SIGTERM
            child = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                     env=_child_env())
            self._running.add(child)
        try:
            return child.wait()
        finally:
            with self._lock:
                self._running.discard(child)

    def stop(self, grace_s: float = 30.0) -> None:
        """SIGTERM to every running child, SIGKILL to one still running after `grace_s`."""
        with self._lock:
            self._stopped = True
            running = list(self._running)
        for child in running:
            child.terminate()
        for child in running:
            try:
                child.wait(grace_s)
            except subprocess.TimeoutExpired:
                child.kill()


def _run_children(target: Target, opts: RunOptions, log: Path,
                  children: _Children) -> tuple[float, str | None]:
    """The target's child runs, one after another, output into `log`: (seconds, None) or
    (seconds, what failed)."""
    start = time.perf_counter()
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        for args in commands(target, opts):
            argv = [sys.executable, "-m", "powerbench.cli", *args]
            print(f"{target.name}: {' '.join(argv[1:])}", flush=True)
            out.write(f"$ {' '.join(argv)}\n")
            out.flush()
            code = children.run(argv, out)
            if code != 0:
                return (time.perf_counter() - start,
                        f"`powerbench {' '.join(args[:2])} ...` exited with {code}")
    return time.perf_counter() - start, None


def _finish(target: Target, opts: RunOptions, log: Path, seconds: float,
            failed: str | None) -> Outcome:
    """The Outcome of a target whose children ran for `seconds`: its figure drawn (when
    they succeeded), the drawing's time added."""
    if failed:
        return Outcome(target.name, seconds, log=log, quick=opts.quick,
                       error=(f"{failed} (log: {log.name} in the run directory):\n"
                              f"{_tail(log)}"))
    start = time.perf_counter()
    try:
        output = target.figure(tracking_uri=opts.tracking_uri, out_dir=opts.out_dir)
    except Exception as err:  # noqa: BLE001 - reported with the others, not fatal to them
        return Outcome(target.name, seconds + time.perf_counter() - start, log=log,
                       quick=opts.quick, error=f"figure failed: {type(err).__name__}: {err}")
    return Outcome(target.name, seconds + time.perf_counter() - start, output=output,
                   log=log, quick=opts.quick)


def run_target(target: Target, opts: RunOptions) -> Outcome:
    """The target's child runs, then its figure; failures come back in the Outcome."""
    log, children = opts.work_dir / f"{target.name}.log", _Children()
    try:
        ran = _run_children(target, opts, log, children)
    except BaseException:
        children.stop()
        raise
    return _finish(target, opts, log, *ran)


def run_targets(targets: Sequence[Target], opts: RunOptions) -> Iterator[Outcome]:
    """Each target's Outcome as it finishes. With `opts.parallel_targets` > 1 the simulated
    targets' children run that many at a time (each target's seconds are its own children's
    wall time plus its figure's); the measured targets then run one at a time, alone, as
    they all do with 1, in the order given. Figures are drawn here, in the calling thread
    (matplotlib is not thread-safe). An exception reaching here (Ctrl-C, SIGTERM) ends the
    running children and starts no other."""
    together = [t for t in targets if t.simulated] if opts.parallel_targets > 1 else []
    if together:
        children = _Children()
        logs = {t.name: opts.work_dir / f"{t.name}.log" for t in together}
        with ThreadPoolExecutor(opts.parallel_targets, "reproduce") as pool:
            running = {pool.submit(_run_children, t, opts, logs[t.name], children): t
                       for t in together}
            try:
                for done in as_completed(running):
                    target = running[done]
                    yield _finish(target, opts, logs[target.name], *done.result())
            except BaseException:
                pool.shutdown(wait=False, cancel_futures=True)
                children.stop()
                raise
    for target in targets:
        if target.simulated and together:
            continue  # ran above
        yield run_target(target, opts)
