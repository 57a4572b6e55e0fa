"""Operator benchmark: sparse backends vs torch dense, side by side in one run.

    .venv/bin/python experiments/bench_operators.py [--quick] [--device cuda] [...]

Writes results/operators_<device>[_quick].csv and .png and logs an MLflow run in the
experiment ``operators``. The implementation is :mod:`powerbench.ops.bench` (``main``).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from powerbench.ops.bench import main as _bench_main  # noqa: E402


def main(argv: Sequence[str] | None = None) -> int:
    return _bench_main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
