"""`powerbench`: one Hydra app; the task (conf/task) says what an invocation does.

    powerbench [overrides...]                   task=run: the experiment pipeline
    powerbench tour [overrides...]              the whole idea in one table (make run)
    powerbench validate [overrides...]          measured vs simulated on hardware=local
    powerbench bench-decode [overrides...]      decode tokens/s, dense vs sparse, side by side
    powerbench bench-operators [overrides...]   sparse operators vs torch dense
    powerbench bench-solver [overrides...]      placement solvers at paper scale
    powerbench bench-threshold [overrides...]   CATS threshold sparsity on SmolLM2 vs llama.cpp
    powerbench bench-flash [overrides...]       flash-offloaded FFN vs in DRAM (PowerInfer-2)
    powerbench hybrid-local [overrides...]      engine=hybrid measured on a GPU + its twin
    powerbench figure [NAME...] [overrides...]  figures redrawn from MLflow runs
    powerbench reproduce NAME...|all [--quick]  paper figures: sweep, figure, reproduction.md
    powerbench reproduce --list                 the reproduction targets
    powerbench constants                        docs/constants.md: every constant, source, range
    powerbench sensitivity                      calibration rows and their ±20% sensitivity
    powerbench sync                             upload runs queued while the server was down
    powerbench mlflow-server                    a shared MLflow server on PostgreSQL
    powerbench ui [URI]                         the command that opens MLflow's dashboard

`--force` (= `rerun=true`) runs jobs that finished before; without it a re-run of a sweep
skips them. `--quick` is `task.quick=true` and `--list` is `task.list=true`.

`powerbench <task> ...` is `powerbench task=<task> ...`: every task gets a run directory,
`--multirun`, `--cfg job`, `--help` and MLflow tracking. Task options live under `task.`
(e.g. `powerbench bench-decode task.rounds=41`). The composed config is converted to typed
dataclasses once, here, and the task is built from it (`build(cfg.task, cfg, out_dir)`).
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import hydra
from omegaconf import DictConfig

from powerbench.config import CONF_DIR, register_configs
from powerbench.config.help import HELP_FLAGS, app_help

log = logging.getLogger("powerbench")

TASKS = ("tour", "validate", "bench-decode", "bench-operators", "bench-solver", "bench-flash",
         "bench-threshold", "hybrid-local", "figure", "reproduce", "sync", "mlflow-server", "ui",
         "constants", "sensitivity")
# bare words after these tasks fill one option: `powerbench figure fig10 fig12`
POSITIONAL = {"figure": "task.figures", "reproduce": "task.targets", "ui": "tracking.uri"}
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
    if not argv or argv[0] not in TASKS:
        return list(argv)
    name, rest = argv[0], list(argv[1:])
    words = [a for i, a in enumerate(rest) if "=" not in a and not a.startswith("-")
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
    config = typed(cfg)  # the one conversion: typed dataclasses from here down
    return build(config.task, config, out_dir)


def _killed(signum: int, frame: object) -> None:
    from powerbench.tracking.tracker import JobKilled

    raise JobKilled(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _killed)  # a scheduler's kill: the run ends KILLED
    args = task_overrides(sys.argv[1:] if argv is None else argv)
    if any(a in HELP_FLAGS for a in args):  # one composition, not Hydra's (see config.help)
        print(app_help([a for a in args if not a.startswith("-")]))
        raise SystemExit(0)
    sys.argv = [sys.argv[0] if sys.argv else "powerbench", *args]
    register_configs()
    _app()


if __name__ == "__main__":
    main()
