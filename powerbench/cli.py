"""`powerbench`: one Hydra app; the task (conf/task) says what an invocation does.

    powerbench [overrides...]                   task=run: the experiment pipeline
    powerbench tour [overrides...]              the whole idea in one table (make run)
    powerbench validate [overrides...]          measured vs simulated on hardware=local
    powerbench bench-decode [overrides...]      decode tokens/s, dense vs sparse, side by side
    powerbench bench-operators [overrides...]   sparse operators vs the best dense kernel
    powerbench bench-powerinfer-ops [...]       PowerInfer's own CPU operators (its ggml) here
    powerbench bench-solver [overrides...]      placement solvers at paper scale
    powerbench bench-threshold [overrides...]   CATS threshold sparsity on SmolLM2 vs llama.cpp
    powerbench bench-flash [overrides...]       flash-offloaded FFN vs in DRAM (PowerInfer-2)
    powerbench hybrid-local [overrides...]      engine=hybrid measured on a GPU + its twin
    powerbench bench-hybrid [overrides...]      engine=hybrid vs layer offload on a GPU + twin
    powerbench figure [NAME...] [overrides...]  figures redrawn from MLflow runs
    powerbench reproduce NAME...|all [--quick]  paper figures: sweep, figure, the report
    powerbench reproduce --list                 the reproduction targets
    powerbench constants                        docs/constants.md: every constant, source, range
    powerbench sensitivity                      calibration rows and their ±20% sensitivity
    powerbench sync                             upload runs queued while the server was down
    powerbench mlflow-server                    a shared MLflow server on PostgreSQL
    powerbench ui [URI]                         the command that opens MLflow's dashboard
    powerbench docs                             regenerate docs/configuration.md, metrics.md

`--force` (= `rerun=true`) runs jobs that finished before; without it a re-run of a sweep
skips them. `--quick` is `task.quick=true` and `--list` is `task.list=true`.

`powerbench <task> ...` is `powerbench task=<task> ...`: every task gets a run directory,
`--multirun`, `--cfg job`, `--help` and MLflow tracking. Task options live under `task.`
(e.g. `powerbench bench-decode task.rounds=41`). The composed config is converted to typed
dataclasses once, here, and the task is built from it (`build(cfg.task, cfg, out_dir)`).
A user error (`powerbench.schema_helpers.UserError`: a setting out of range, a model that
does not fit its budget) prints its message alone and exits 1; what the run wrote before
it stays in its run directory. `HYDRA_FULL_ERROR=1` shows its traceback, as every other
exception's.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import hydra
from hydra.errors import CompactHydraException
from omegaconf import DictConfig

from powerbench.config import CONF_DIR, register_configs
from powerbench.config.help import HELP_FLAGS, app_help
from powerbench.paths import check_cache_writable
from powerbench.schema_helpers import UserError

log = logging.getLogger("powerbench")

# every task after `powerbench` (task=run, the pipeline, is the default): its one-line help
TASKS = {
    "tour": "the whole idea in one table (make run)",
    "validate": "measured vs simulated on hardware=local",
    "bench-decode": "decode tokens/s, dense vs sparse, side by side",
    "bench-operators": "sparse operators vs the best dense kernel (ours or torch)",
    "bench-powerinfer-ops": "PowerInfer's own CPU FFN operators (its ggml, a checkout) here",
    "bench-solver": "placement solvers at paper scale",
    "bench-flash": "flash-offloaded FFN vs in DRAM (PowerInfer-2)",
    "bench-threshold": "CATS threshold sparsity on SmolLM2 vs llama.cpp",
    "hybrid-local": "engine=hybrid measured on a GPU + its twin",
    "bench-hybrid": "engine=hybrid vs layer offload on a GPU, real-size shape + twin",
    "figure": "figures redrawn from MLflow runs",
    "reproduce": "paper figures: sweep, figure, the report in results/reproduction/ (--list, --quick)",
    "sync": "upload runs queued while the tracking server was down",
    "mlflow-server": "a shared MLflow server on PostgreSQL",
    "ui": "the command that opens MLflow's dashboard, and the link to the runs",
    "docs": "regenerate docs/configuration.md and docs/metrics.md",
    "constants": "regenerate docs/constants.md: every cost-model constant, its source, range",
    "sensitivity": "the calibration rows and how each moves with every constant at ±20%",
}
# bare words after these tasks fill one option: `powerbench figure fig10 fig12`
POSITIONAL = {"figure": "task.figures", "reproduce": "task.targets", "ui": "tracking.uri"}
ARGUMENT = {"figure": "[NAME...]", "reproduce": "NAME...|all", "ui": "[URI]"}  # in usage
LIST_OPTIONS = {"task.figures", "task.targets"}  # every bare word, as a list
# flag sugar -> override: `powerbench reproduce --quick fig12`
SUGAR = {"--force": "rerun=true", "--quick": "task.quick=true", "--list": "task.list=true"}
# Hydra flags followed by a value (`--cfg job`): that value is not a bare word
FLAGS_WITH_VALUE = {"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name",
                    "-cn", "--config-dir", "-cd", "--experimental-rerun", "--info", "-i"}


def task_overrides(argv: Sequence[str]) -> list[str]:
    """`[<task>] args...` -> Hydra arguments with `task=<task>` (bare words -> its option),
    `--force` -> `rerun=true`, `--quick` -> `task.quick=true`, `--list` -> `task.list=true`."""
    flags = [a for a in argv if a in SUGAR]
    if flags:
        return [*task_overrides([a for a in argv if a not in SUGAR]),
                *(SUGAR[f] for f in dict.fromkeys(flags))]
    if argv and argv[0] in ("-m", "--multirun"):  # `powerbench -m bench-solver ...`
        return [argv[0], *task_overrides(argv[1:])]
    if not argv or argv[0] not in TASKS:
        return list(argv)
    name, rest = argv[0], list(argv[1:])
    words = [a for i, a in enumerate(rest) if "=" not in a and not a.startswith(("-", "~"))
             and not (i and rest[i - 1] in FLAGS_WITH_VALUE)]
    if words and name not in POSITIONAL:
        raise SystemExit(f"powerbench {name}: unexpected {words}; options are Hydra "
                         f"overrides, e.g. task.rounds=3 (see powerbench {name} --help)")
    others = [a for a in rest if a not in words]
    if words:
        key = POSITIONAL[name]
        value = f"[{','.join(words)}]" if key in LIST_OPTIONS else words[0]
        others.append(f"{key}={value}")
    return [f"task={name.replace('-', '_')}", *others]


def tasks_help() -> str:
    """The tasks section of `--help`: every task, its argument and what it does."""
    rows = [("powerbench [overrides...]", "the experiment pipeline (task=run, the default)")]
    for name, text in TASKS.items():
        argument = f" {ARGUMENT[name]}" if name in ARGUMENT else ""
        where = f" ({ARGUMENT[name]} sets {POSITIONAL[name]})" if name in POSITIONAL else ""
        rows.append((f"powerbench {name}{argument} [overrides...]", text + where))
    width = max(len(usage) for usage, _ in rows)
    return "\n".join(f"  {usage:<{width}}  {text}" for usage, text in rows)


def job_threads(launcher: DictConfig, cores: int) -> int | None:
    """Threads one job of a parallel sweep may use: the launcher's cpus_per_task (submitit,
    SLURM), else cores / n_jobs (joblib); None for the one-at-a-time basic launcher."""
    cpus = launcher.get("cpus_per_task")
    if cpus:
        return int(cpus)
    jobs = launcher.get("n_jobs")
    if jobs is None:
        return None
    jobs = cores if jobs < 1 else min(int(jobs), cores)  # joblib: -1 = every core
    return max(1, cores // jobs)


class UserErrorMessage(CompactHydraException):
    """A UserError as Hydra reports it: the message alone (Hydra prints a compact
    exception's text, no traceback, and exits 1; with HYDRA_FULL_ERROR=1 it raises it, the
    user error its cause). The job still ends FAILED: a sweep goes on with the next."""


@hydra.main(version_base=None, config_path=CONF_DIR, config_name="config")
def _app(cfg: DictConfig) -> object:
    import os

    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from powerbench.build import build
    from powerbench.config import typed

    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode == RunMode.MULTIRUN:
        threads = job_threads(hydra_cfg.launcher, os.cpu_count() or 1)
        if threads:  # parallel jobs must not oversubscribe the cores
            import torch

            torch.set_num_threads(threads)
            os.environ["OMP_NUM_THREADS"] = str(threads)
    out_dir = Path(hydra_cfg.runtime.output_dir)
    try:
        config = typed(cfg)  # the one conversion (ranges checked): typed dataclasses from here
        check_cache_writable(config.cache_dir)  # a real write, before any task does work
        return build(config.task, config, out_dir)
    except UserError as err:
        raise UserErrorMessage(f"{type(err).__name__}: {err}") from err


def _killed(signum: int, frame: object) -> None:
    from powerbench.tracking.tracker import JobKilled

    raise JobKilled(f"signal {signum}")


# exit status of an interrupted invocation: 128 + the signal, as a shell reports it
EXIT_SIGTERM = 128 + signal.SIGTERM  # 143
EXIT_SIGINT = 128 + signal.SIGINT  # 130


def _run_app() -> None:
    """The Hydra app; Ctrl-C or SIGTERM ends a running sweep's parent run KILLED (its
    running child already ends KILLED) and exits 130 / 143."""
    from powerbench.tracking.callbacks import end_interrupted_sweep
    from powerbench.tracking.tracker import JobKilled

    try:
        _app()
    except JobKilled:
        end_interrupted_sweep("KILLED")
        log.error("terminated (SIGTERM): the run and its sweep are marked KILLED")
        raise SystemExit(EXIT_SIGTERM) from None
    except KeyboardInterrupt:
        end_interrupted_sweep("KILLED")
        log.error("interrupted (Ctrl-C): the run and its sweep are marked KILLED")
        raise SystemExit(EXIT_SIGINT) from None


def main(argv: Sequence[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _killed)  # a scheduler's kill: the run ends KILLED
    args = task_overrides(sys.argv[1:] if argv is None else argv)
    if any(a in HELP_FLAGS for a in args):  # one composition, not Hydra's (see config.help)
        print(app_help([a for a in args if not a.startswith("-")], tasks_help()))
        raise SystemExit(0)
    sys.argv = [sys.argv[0] if sys.argv else "powerbench", *args]
    register_configs()
    _run_app()


if __name__ == "__main__":
    main()
