"""`powerbench bench-flash`: FlashFFN at several DRAM budgets vs the in-DRAM sparse FFN,
plus the bundling / pipelining ablation, side by side in one run (powerbench.flash.bench)."""

from __future__ import annotations

from pathlib import Path

from powerbench.build import build
from powerbench.config import PowerbenchConfig, as_container
from powerbench.flash.bench import BenchShape, FlashBenchReport, default_variants, run_flash_bench
from powerbench.paths import cache_dir, results_dir
from powerbench.tasks.config import BenchFlashTask


def bench_flash(task: BenchFlashTask, cfg: PowerbenchConfig, out_dir: Path) -> FlashBenchReport:
    shape = BenchShape(n_layers=task.layers, d_model=task.d_model, d_ffn=task.d_ffn,
                       dtype=task.dtype)
    report = run_flash_bench(shape, default_variants(tuple(task.budgets)), tokens=task.tokens,
                             rounds=task.rounds, warmup=task.warmup, io_threads=task.io_threads,
                             hot_fraction=task.hot_fraction,
                             cache_dir=str(cache_dir(cfg.cache_dir) / "flash"),
                             decode_model=task.decode_model, decode_tokens=task.decode_tokens)
    text = report.render()
    print(text)
    out = Path(task.out) if task.out else results_dir() / "flash_bench.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    tracker = build(cfg.tracking)
    with tracker.run("bench-flash", tags={"measured": "true", "synthetic_weights": "true"}):
        tracker.log_params({"task": as_container(task)})
        tracker.log_metrics({f"{r.variant.name.replace(' ', '_').replace('%', 'pct')}"
                             "_tokens_per_s": r.tokens_per_s
                             for r in report.results + report.decode_results})
        tracker.log_artifact(out)
    return report
