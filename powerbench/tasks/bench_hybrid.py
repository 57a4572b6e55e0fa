"""`powerbench bench-hybrid`: engine=hybrid against llama.cpp-style layer offload of the same
GPU bytes, on a real-size shape with synthetic weights, measured on this machine's GPU and
CPU, each row beside its simulated twin (powerbench.measure.hybrid_bench).

    powerbench bench-hybrid [model@task.synthetic_model=opt_6_7b] [task.layers=8]
        [task.gpu_ffn_shares=[0.25,0.5]] [task.threads=8] [task.publish=true]

Reports through the measurement harness (study `hybrid_gpu`): the table with the machine
(GPU included) and load window, CSV and JSON in the run directory, one MLflow run;
`task.publish=true` also writes results/hybrid_gpu/. On a GPU machine with torch alone,
`experiments/bench_gpu.py hybrid` runs the same benchmark. Without a CUDA GPU it stops with the
message.
"""

from __future__ import annotations

from pathlib import Path

from powerbench.config import PowerbenchConfig
from powerbench.engine.hybrid import SIMULATE_INSTEAD
from powerbench.measure.harness import Report, run_benchmark
from powerbench.measure.hybrid_bench import HybridBenchConfig, hybrid_report, local_profile
from powerbench.tasks.config import BenchHybridTask


def bench_hybrid(task: BenchHybridTask, cfg: PowerbenchConfig, out_dir: Path) -> list[Report]:
    import torch

    from powerbench.engine.synthetic import synthetic_spec

    if not torch.cuda.is_available():
        raise SystemExit("bench-hybrid measures engine=hybrid on a CUDA GPU and this machine "
                         f"has none (torch {torch.__version__}); {SIMULATE_INSTEAD}")
    bench = HybridBenchConfig(layers=task.layers, gpu_ffn_shares=tuple(task.gpu_ffn_shares),
                              batch=task.batch, prompt_tokens=task.prompt_tokens,
                              new_tokens=task.new_tokens, rounds=task.rounds,
                              cpu_threads=task.threads, cpu_parts=tuple(task.cpu_parts))
    full = synthetic_spec(task.synthetic_model)  # composed by Hydra (conf/task/bench_hybrid.yaml)

    def measure() -> Report:
        hardware = (local_profile(bench, str(Path(out_dir) / "local_profile.json"))
                    if task.simulate else None)
        return hybrid_report(full, bench, hardware)

    return run_benchmark(cfg, out_dir, measure, task.publish)
