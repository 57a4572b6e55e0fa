"""Decode benchmark: our decoder dense vs sparse (each predictor strategy), side by side.

    .venv/bin/python experiments/bench_decode.py [--rounds 15] [hydra overrides...]

Same as `powerbench bench-decode`; the implementation is :mod:`powerbench.engine.bench_decode`.
Writes results/decode_cpu.csv and logs an MLflow run in the experiment ``bench_decode``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from powerbench.engine.bench_decode import main as _bench_main  # noqa: E402


def main(argv: Sequence[str] | None = None) -> int:
    return _bench_main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
