"""End-to-end figures (issue #6), SIMULATED: MLflow runs -> results/<figure>.csv and .png.

    .venv/bin/powerbench --multirun +experiment=pc_high_e2e     # 60 simulated jobs
    .venv/bin/powerbench --multirun +experiment=pc_low_e2e      # 48 simulated jobs
    .venv/bin/python experiments/figure_e2e.py [pc_high_e2e] [pc_low_e2e] [--tracking-uri URI]

Prints each table (tokens/s of both systems, speedup, GPU neuron-load share). The
implementation is powerbench.figures.e2e (one function per figure).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from powerbench.figures import FIGURES  # noqa: E402

SHOWN = ["model", "weight_dtype", "new_tokens", "llamacpp_tokens_per_s",
         "powerinfer_tokens_per_s", "speedup", "llamacpp_gpu_neuron_load_share",
         "powerinfer_gpu_neuron_load_share"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("figures", nargs="*", default=[],
                        help=f"figures to draw (default: all of {', '.join(FIGURES)})")
    parser.add_argument("--tracking-uri", default=None,
                        help="MLflow store (default: the project's SQLite store)")
    parser.add_argument("--out-dir", default=None, help="default: results/")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.figures) - set(FIGURES))
    if unknown:
        parser.error(f"unknown figure(s) {unknown}; choose from {', '.join(FIGURES)}")
    status = 0
    for name in args.figures or list(FIGURES):
        try:
            out = FIGURES[name](tracking_uri=args.tracking_uri, out_dir=args.out_dir)
        except LookupError as err:
            print(f"{name}: {err}", file=sys.stderr)
            status = 1
            continue
        print(f"\n{name} (SIMULATED) -> {out.csv}, {out.png}")
        print(out.table[SHOWN].to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    return status


if __name__ == "__main__":
    raise SystemExit(main())
