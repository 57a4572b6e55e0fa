"""The top-level experiment schema. Group nodes carry their own schemas (see store.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from powerbench.schema import MISSING


@dataclass
class ProfilingConfig:
    """How much text the activation profiler sees (measured models)."""

    max_tokens: int = 16384  # tokens pushed through the model
    seq_len: int = 128  # tokens per profiling sequence
    samples_per_layer: int = 4096  # (hidden, mask) pairs kept per layer for predictors
    trace_tokens: int = 256  # per-token masks kept (synthetic profiles draw this many)
    batch_size: int = 16


@dataclass
class BenchConfig:
    """How decode/prefill speed is measured."""

    prompt_tokens: int = 64
    new_tokens: int = 64
    batch_size: int = 1
    warmup: int = 1
    repeats: int = 3
    threads: int = 1  # 0: torch's default (all cores); tiny models decode fastest on one
    greedy: bool = True


@dataclass
class EvalConfig:
    max_tokens: int = 16384  # held-out tokens for perplexity
    seq_len: int = 128
    mc_task: str | None = "continuation"  # offline task; piqa/winogrande/arc_easy need the hub
    mc_items: int = 200


@dataclass
class PowerbenchConfig:
    name: str = "default"
    seed: int = 0
    rerun: bool = False  # run a job even if the same config finished before (--force)
    cache_dir: str | None = None  # default: powerbench.paths.cache_dir()
    model: Any = MISSING
    dataset: Any = MISSING
    engine: Any = None  # measured on this machine (models with weights)
    tracking: Any = MISSING
    hardware: Any = None  # optional stages: placement runs when hardware and solver are set
    solver: Any = None
    predictor: Any = None
    simulator: Any = None  # the cost model for `hardware` (needs solver and hardware)
    task: Any = MISSING  # what this invocation does (conf/task; default `run`)
    profiling: ProfilingConfig = field(default_factory=ProfilingConfig)
    bench: BenchConfig = field(default_factory=BenchConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    reproduce: Any = None  # conf/experiment: how `powerbench reproduce` runs it (read there)
