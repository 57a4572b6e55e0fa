"""The pipeline's predictor stage in one call: predictors built (cached), sized against
measured perplexity where the strategy asks for it, and reported.

It lives above `predictor` because adaptive sizing calls back into evaluation (masked
perplexity on calibration text).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from powerbench.evaluation.ppl_callback import calibration_perplexity
from powerbench.predictor.cached_predictors import build_predictors, make_strategy, predictor_report
from powerbench.predictor.predictor_set import ActivePredictor
from powerbench.profiling.activation_profile import ActivationProfile


def prepare_predictors(cfg: Any, loaded, profile: ActivationProfile, cache_dir: Path | str,
                       out_dir: Path | str, calibration_texts: list[str] | None = None,
                       seq_len: int = 128, calibration_tokens: int = 4096,
                       ) -> tuple[ActivePredictor | None, dict[str, float], list[Path]]:
    """The pipeline's predictor stage in one call: build (cached) + metrics + CSV.

    Strategies that use perplexity (adaptive) get a masked-forward perplexity callback on
    the last documents of `calibration_texts` (the train split) when the model has weights.
    """
    evaluate_ppl = None
    if make_strategy(cfg).uses_ppl and calibration_texts and loaded.has_weights:
        evaluate_ppl = calibration_perplexity(loaded.model, loaded.tokenizer,
                                              list(calibration_texts), seq_len,
                                              calibration_tokens)
    predictors = build_predictors(cfg, loaded, profile, cache_dir, evaluate_ppl)
    metrics, files = predictor_report(predictors, loaded.spec, profile, out_dir)
    return predictors, metrics, files
