"""Validation of the cost model on this machine (issue #6): measured vs simulated.

    .venv/bin/python experiments/validate_local.py [--engines dense,sparse_cpu] [overrides...]

Runs the trained tiny model on `hardware=local` with each engine MEASURED and SIMULATED
(the `local` profile as measured, and calibrated by three extra microbenchmarks), logs one
MLflow run per (engine, rates) with `sim_error_pct` (decode), `sim_prefill_error_pct`
and `sim_end_to_end_error_pct`, and writes results/validation_local.csv and .png.
The implementation is powerbench.simulator.validate.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from powerbench.simulator.validate import main as _main  # noqa: E402


def main(argv: Sequence[str] | None = None) -> int:
    return _main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
