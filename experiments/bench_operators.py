"""Operator benchmark where only torch is installed (a lent GPU machine has no Hydra/MLflow).

    PYTHONPATH=. python3 experiments/bench_operators.py [--quick] [--device cuda] [...]

Writes results/operators_<device>/operators[_quick].csv and .png, no MLflow run. With the project
installed, `powerbench bench-operators [task.quick=true] [task.device=cuda]` is the same
benchmark as a Hydra task (run dir, --multirun, MLflow). Both run powerbench.ops.bench.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import torch  # noqa: E402

from powerbench.ops.bench import DTYPES, OPS, QUICK, OperatorBenchConfig, run_benchmark  # noqa: E402
from powerbench.ops.bench_report import load_average, target_notes, write_outputs  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench_operators", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="4096x16384 fp32 batch 1, 4 sparsities (under a minute)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--shapes", nargs="+", help="d_model x d_ffn, e.g. 4096x16384")
    p.add_argument("--dtypes", nargs="+", choices=tuple(DTYPES))
    p.add_argument("--batches", nargs="+", type=int)
    p.add_argument("--sparsities", nargs="+", type=float)
    p.add_argument("--ops", nargs="+", choices=OPS)
    p.add_argument("--backends", nargs="+")
    p.add_argument("--threads", type=int, help="torch.set_num_threads before running")
    p.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parents[1] / "results")
    p.add_argument("--no-plot", action="store_true")
    return p


def config_from_args(args: argparse.Namespace) -> OperatorBenchConfig:
    cfg = replace(QUICK if args.quick else OperatorBenchConfig(), device=args.device)
    chosen = {"shapes": args.shapes, "dtypes": args.dtypes, "batches": args.batches,
              "sparsities": args.sparsities, "ops": args.ops, "backends": args.backends}
    return replace(cfg, **{k: tuple(v) for k, v in chosen.items() if v})


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = config_from_args(args)
    started, load_before = time.perf_counter(), load_average()
    rows, _ = run_benchmark(cfg, log=lambda line: print(line, flush=True))
    print("\n".join(target_notes(rows)))
    outputs = write_outputs(rows, args.out_dir, cfg.device, "_quick" if args.quick else "",
                            plot=not args.no_plot)
    print(f"# {len(rows)} rows in {time.perf_counter() - started:.0f} s; load before "
          f"{load_before}, after {load_average()}; wrote {', '.join(map(str, outputs))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
