"""`powerbench`: the Hydra app (default), plus a few subcommands.

    powerbench [hydra overrides...]          run one experiment (or --multirun a sweep)
    powerbench bench-operators [--quick]     sparse operator benchmark
    powerbench bench-solver                  placement solver scale benchmark
    powerbench bench-decode [--rounds N]     decode tokens/s, dense vs sparse, side by side
    powerbench validate [overrides]          measured vs simulated on hardware=local
    powerbench figure NAME                   regenerate a figure from MLflow runs
    powerbench ui                            print the command that opens MLflow's dashboard
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path

import hydra
from omegaconf import DictConfig

from powerbench.config import CONF_DIR, register_configs

log = logging.getLogger("powerbench")


def _results_table(metrics: dict[str, float], notes: list[str]) -> str:
    width = max((len(k) for k in metrics), default=10)
    lines = [f"{'metric':<{width}}  value", f"{'-' * width}  {'-' * 14}"]
    for key in sorted(metrics):
        value = metrics[key]
        shown = f"{value:.4g}" if abs(value) < 1e6 else f"{value:.4e}"
        lines.append(f"{key:<{width}}  {shown}")
    return "\n".join(notes + [""] + lines)


@hydra.main(version_base=None, config_path=CONF_DIR, config_name="config")
def _hydra_main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    from powerbench.pipeline import run_experiment
    from powerbench.tracking import ui_command

    out_dir = Path(HydraConfig.get().runtime.output_dir)
    ctx = run_experiment(cfg, out_dir)
    print("\n" + _results_table(ctx.metrics, ctx.notes))
    print(f"\nresults: {out_dir}/metrics.json")
    if ctx.tracker.enabled:
        print(f"MLflow run {ctx.tracker.run_id} in experiment '{ctx.tracker.experiment}'.")
        print(f"Open the dashboard with:\n  {ui_command(ctx.tracker.uri)}")


def _ui(argv: list[str]) -> None:
    from powerbench.tracking import default_tracking_uri, ui_command

    print(ui_command(argv[0] if argv else default_tracking_uri()))


def _bench_operators(argv: list[str]) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
    import bench_operators  # noqa: PLC0415

    bench_operators.main(argv)


def _bench_solver(argv: list[str]) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
    import bench_solver  # noqa: PLC0415

    bench_solver.main(argv)


def _bench_decode(argv: list[str]) -> None:
    from powerbench.engine.bench_decode import main as bench_decode_main

    bench_decode_main(argv)


def _validate(argv: list[str]) -> None:
    from powerbench.simulator.validate import main as validate_main

    validate_main(argv)


def _figure(argv: list[str]) -> None:
    from powerbench.figures import FIGURES

    if not argv or argv[0] not in FIGURES:
        raise SystemExit(f"usage: powerbench figure NAME; NAME is one of {sorted(FIGURES)}")
    out = FIGURES[argv[0]]()
    print(out.table.to_string(index=False))
    print(f"\nwrote {out.csv} and {out.png}")


SUBCOMMANDS: dict[str, Callable[[list[str]], None]] = {
    "ui": _ui,
    "validate": _validate,
    "figure": _figure,
    "bench-operators": _bench_operators,
    "bench-solver": _bench_solver,
    "bench-decode": _bench_decode,
}


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if len(sys.argv) > 1 and sys.argv[1] in SUBCOMMANDS:
        SUBCOMMANDS[sys.argv[1]](sys.argv[2:])
        return
    register_configs()
    _hydra_main()


if __name__ == "__main__":
    main()
