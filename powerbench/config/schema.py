"""The top-level experiment schema. Group nodes carry their own schemas (see store.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from powerbench.schema_helpers import MISSING, ConfigRangeError, MissingSettingError, check_range


@dataclass
class ProfilingConfig:
    """How much text the activation profiler sees (measured models)."""

    max_tokens: int = 16384  # tokens pushed through the model
    seq_len: int = 128  # tokens per profiling sequence
    samples_per_layer: int = 4096  # (hidden, mask) pairs kept per layer for predictors
    trace_tokens: int = 256  # per-token masks kept (synthetic profiles draw this many)
    batch_size: int = 16

    def __post_init__(self) -> None:
        check_range("profiling.seq_len", self.seq_len, 2)
        check_range("profiling.max_tokens", self.max_tokens, self.seq_len)
        check_range("profiling.samples_per_layer", self.samples_per_layer, 1)
        check_range("profiling.trace_tokens", self.trace_tokens, 0)  # 0: no per-token trace
        check_range("profiling.batch_size", self.batch_size, 1)


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

    def __post_init__(self) -> None:
        check_range("bench.prompt_tokens", self.prompt_tokens, 1)
        check_range("bench.new_tokens", self.new_tokens, 1)
        check_range("bench.batch_size", self.batch_size, 1)
        check_range("bench.warmup", self.warmup, 0)
        check_range("bench.repeats", self.repeats, 1)
        check_range("bench.threads", self.threads, 0)


@dataclass
class EvalConfig:
    max_tokens: int = 16384  # held-out tokens for perplexity
    seq_len: int = 128
    mc_task: str | None = "continuation"  # offline task; piqa/winogrande/arc_easy need the hub
    mc_items: int = 200

    def __post_init__(self) -> None:
        check_range("eval.seq_len", self.seq_len, 2)
        check_range("eval.max_tokens", self.max_tokens, self.seq_len)  # at least one window
        check_range("eval.mc_items", self.mc_items, 0)


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

    def __post_init__(self) -> None:
        self._check_positions()
        check_engine = getattr(self.engine, "check_composed", None)
        if check_engine is not None:  # the engine against the predictor and this machine
            check_engine(self.predictor)
        self._check_placement_settings()

    def _check_placement_settings(self) -> None:
        """A simulator, and an engine that follows a placement (`needs_placement`, e.g.
        engine=hybrid), need one (hardware and solver): MissingSettingError naming the
        missing settings and their options, when the config is composed."""
        needers = [f"simulator={getattr(self.simulator, 'name', '?')}"] \
            if self.simulator is not None else []
        if getattr(self.engine, "needs_placement", False):
            needers.append(f"engine={self.engine.name}")
        if not needers or (self.solver is not None and self.hardware is not None):
            return
        from powerbench.config import CONF_DIR
        from powerbench.config.help import config_groups

        options = config_groups(CONF_DIR)
        missing = [f"{group}=<name> ({', '.join(options.get(group, []))})"
                   for group in ("hardware", "solver") if getattr(self, group) is None]
        raise MissingSettingError(f"{' and '.join(needers)} need{'s' * (len(needers) == 1)} "
                                  f"a placement: add {' and '.join(missing)}")

    def _check_positions(self) -> None:
        """A measured decode must fit the model's positions (prompt + generated tokens)."""
        if self.engine is None or not hasattr(self.model, "name"):
            return
        limit = next((getattr(part, "max_positions", None)
                      for part in (getattr(self.model, "tiny", None),
                                   getattr(self.model, "spec", None)) if part is not None), None)
        total = self.bench.prompt_tokens + self.bench.new_tokens
        if limit is not None and total > limit:
            raise ConfigRangeError(
                f"bench.prompt_tokens + bench.new_tokens = {self.bench.prompt_tokens} + "
                f"{self.bench.new_tokens} = {total} is out of range for model "
                f"{self.model.name} (max_positions {limit}); valid: bench.prompt_tokens + "
                f"bench.new_tokens <= {limit}")
