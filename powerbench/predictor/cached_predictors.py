"""`build_predictors`: the pipeline's entry point (strategy by `_target_`, cached).

Trained predictor sets are cached in `<cache>/predictors/<key>.pt` (ArtifactCache:
checksummed, atomic; a corrupt entry is rebuilt) with key =
hash(model weights, profile samples, strategy config, perplexity evaluator, code version).
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from powerbench.build import build
from powerbench.cache import ArtifactCache, stable_hash
from powerbench.predictor.predictor_set import ActivePredictor, PredictorSet
from powerbench.predictor.stats import write_stats_csv
from powerbench.predictor.strategies import PplFn, strategy_metrics
from powerbench.profiling.activation_profile import ActivationProfile

log = logging.getLogger(__name__)

CODE_VERSION = "predictors-1"


def make_strategy(cfg: Any) -> Any:
    """The sizing strategy named by `cfg._target_`, built from the typed `cfg`."""
    return build(cfg)


def profile_identity(profile: ActivationProfile) -> str:
    """Hash of what predictor training reads: every layer's (hidden, mask) samples."""
    h = hashlib.sha256()
    h.update(f"{profile.model}|{profile.source}|{profile.dataset}|{profile.n_tokens}".encode())
    for layer in profile.layers:
        for array in (layer.hidden, layer.masks):
            if array is None:
                h.update(b"none")
                continue
            array = np.ascontiguousarray(array)
            h.update(f"{array.dtype}{array.shape}".encode())
            h.update(array.tobytes())
    return h.hexdigest()[:16]


def predictor_cache_key(loaded, profile: ActivationProfile, strategy: Any,
                        evaluate_ppl: PplFn | None) -> str | None:
    """None when the build cannot be identified (a perplexity callback without cache_key)."""
    ppl_key = None
    if strategy.uses_ppl and evaluate_ppl is not None:
        ppl_key = getattr(evaluate_ppl, "cache_key", None)
        if ppl_key is None:
            return None
    return stable_hash(CODE_VERSION, loaded.fingerprint(), profile_identity(profile),
                       asdict(strategy.cfg), ppl_key)


def build_predictors(cfg: Any, loaded, profile: ActivationProfile, cache_dir: Path | str,
                     evaluate_ppl: PplFn | None = None) -> ActivePredictor | None:
    """Build (or load from cache) the predictors `cfg` asks for; None for `none` (dense).

    The result is checked against `loaded.spec` (a cached set for another shape is
    refused with a ValueError naming both shapes).
    """
    strategy = make_strategy(cfg)
    if not strategy.cacheable:
        return strategy.build(loaded, profile, evaluate_ppl)
    key = predictor_cache_key(loaded, profile, strategy, evaluate_ppl)
    make = lambda: strategy.build(loaded, profile, evaluate_ppl)  # noqa: E731
    if key is None:
        log.info("perplexity callback has no cache_key: predictors are built, not cached")
        result, hit = make(), False
    else:
        cache = ArtifactCache(Path(cache_dir) / "predictors", suffix=".pt")
        start = time.perf_counter()
        result, hit = cache.get_or_build(
            key, make, save=lambda value, path: value.save(path),
            load=lambda path: PredictorSet.load(path, expect=loaded.spec),
            meta={"model": loaded.spec.name, "strategy": strategy.cfg.name},
        )
        log.info("predictors %s: %s in %.1fs", key, "cache hit" if hit else "built",
                 time.perf_counter() - start)
    result.check_compatible(loaded.spec)
    result.info["cache_hit"] = hit
    result.info["cache_key"] = key
    return result


def predictor_report(predictors: ActivePredictor | None, spec, profile: ActivationProfile,
                     out_dir: Path | str) -> tuple[dict[str, float], list[Path]]:
    """Overall metrics and artifact files (per-layer CSV when there are trained layers)."""
    metrics = strategy_metrics(predictors, spec, profile)
    files: list[Path] = []
    stats = getattr(predictors, "stats", None)
    if stats:
        files.append(write_stats_csv(stats, Path(out_dir) / "predictor_layers.csv"))
    return metrics, files
