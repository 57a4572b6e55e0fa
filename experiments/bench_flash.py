"""FlashFFN benchmark: in-DRAM sparse FFN vs the flash-offloaded FFN at several DRAM
budgets, plus the bundling / pipelining ablation, side by side in one run.

    PYTHONPATH=. .venv/bin/python experiments/bench_flash.py [--tokens 32] [--rounds 3]
        [--io-threads 16] [--layers 24] [--d-model 2048] [--d-ffn 8192] [--dtype float16]
        [--out results/flash_bench.txt]

Synthetic random weights (only speed is meaningful); see :mod:`powerbench.flash.bench`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from powerbench.flash.bench import BenchShape, default_variants, run_flash_bench  # noqa: E402


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=32, help="decode steps per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=16)
    p.add_argument("--io-threads", type=int, default=16)
    p.add_argument("--hot-fraction", type=float, default=0.5)
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--d-model", type=int, default=2048)
    p.add_argument("--d-ffn", type=int, default=8192)
    p.add_argument("--dtype", default="float16", choices=["float16", "bfloat16", "float32"])
    p.add_argument("--budgets", type=float, nargs="+", default=[1.0, 0.5, 0.25, 0.1])
    p.add_argument("--cache-dir", default=None, help="where the weight file lives "
                   "(default <cache_dir>/flash); the storage measured is this one")
    p.add_argument("--out", default=None, help="also write the report here")
    a = p.parse_args(argv)
    shape = BenchShape(n_layers=a.layers, d_model=a.d_model, d_ffn=a.d_ffn, dtype=a.dtype)
    report = run_flash_bench(shape, default_variants(tuple(a.budgets)), tokens=a.tokens,
                             rounds=a.rounds, warmup=a.warmup, io_threads=a.io_threads,
                             hot_fraction=a.hot_fraction, cache_dir=a.cache_dir)
    text = report.render()
    print(text)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
