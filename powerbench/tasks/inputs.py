"""What the measuring tasks start from: the model, its texts and its activation profile."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powerbench.build import build
from powerbench.config import PowerbenchConfig
from powerbench.dataset import TextSplit, load_texts
from powerbench.paths import cache_dir
from powerbench.profiling.activation_profile import ActivationProfile
from powerbench.profiling.store import load_or_profile


@dataclass
class ModelInputs:
    cache: Path
    loaded: Any  # LoadedModel (with weights)
    split: TextSplit
    profile: ActivationProfile


def model_inputs(cfg: PowerbenchConfig) -> ModelInputs:
    """The experiment's model (built), dataset split and measured profile (cached)."""
    cache = cache_dir(cfg.cache_dir)
    loaded = build(cfg.model, cache_dir=cache)
    split = load_texts(cfg.dataset)
    profile, _ = load_or_profile(loaded, split.train, cfg.profiling, split.name, cache,
                                 seed=cfg.seed)
    return ModelInputs(cache, loaded, split, profile)


@dataclass
class SyntheticInputs:
    """A real-size shape with seeded random weights (powerbench.engine.synthetic): the full
    spec, the `layers`-capped one that runs, its weights, the per-token trace of the kept
    layers from the synthetic profile, and a seeded prompt batch."""

    full: Any  # ModelSpec of the whole model
    spec: Any  # ModelSpec that runs (task.layers kept)
    dtype: Any  # torch dtype
    weights: Any
    build_s: float  # seconds to build the weights
    trace: Any  # TraceProfile of the kept layers
    ids: Any  # int tensor [batch, prompt_tokens]


def synthetic_inputs(model: Any, layers: int | None, dtype: str, seed: int, bench: Any,
                     announce: Callable[[Any, Any], None] | None = None) -> SyntheticInputs:
    """What bench-decode and validate start from on `task.synthetic_model` (a typed model
    config, composed by Hydra); the trace covers every token of the bench (batch x (prompt +
    new)). `announce(full, spec)` runs before the (possibly long) weight build."""
    import time

    import torch

    from powerbench.engine.synthetic import (
        synthetic_decoder_weights,
        synthetic_spec,
        torch_dtype,
        trace_profile,
    )

    full = synthetic_spec(model)
    spec = synthetic_spec(model, layers)
    tdtype = torch_dtype(dtype)
    if announce is not None:
        announce(full, spec)
    start = time.perf_counter()
    weights = synthetic_decoder_weights(spec, tdtype, seed)
    build_s = time.perf_counter() - start
    steps = bench.batch_size * (bench.prompt_tokens + bench.new_tokens)
    trace = trace_profile(full, spec.n_layers, trace_tokens=max(steps, 1), seed=seed)
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, spec.vocab_size, (bench.batch_size, bench.prompt_tokens),
                        generator=gen)
    return SyntheticInputs(full, spec, tdtype, weights, build_s, trace, ids)
