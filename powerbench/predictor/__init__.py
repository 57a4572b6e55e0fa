"""Activation predictors: per-layer active-neuron predictors, their sizing strategies
(fixed / adaptive / oracle / none), training, thresholds and statistics.

Its names need torch only (the engine's constraint) and load on first use, so the config
schema (`predictor.config`) and the statistics import without torch.
"""

from powerbench.build import lazy_attributes

_LAZY = {
    "LayerPredictor": "powerbench.predictor.model",
    "OraclePredictorSet": "powerbench.predictor.oracle",
    "ActivePredictor": "powerbench.predictor.predictor_set",
    "ModelShape": "powerbench.predictor.predictor_set",
    "PredictorBase": "powerbench.predictor.predictor_set",
    "PredictorSet": "powerbench.predictor.predictor_set",
    "LayerPredictorStats": "powerbench.predictor.stats",
    "overall_metrics": "powerbench.predictor.stats",
    "write_stats_csv": "powerbench.predictor.stats",
    "build_predictors": "powerbench.predictor.cached_predictors",
    "predictor_cache_key": "powerbench.predictor.cached_predictors",
    "predictor_report": "powerbench.predictor.cached_predictors",
    "strategy_metrics": "powerbench.predictor.strategies",
}


__getattr__ = lazy_attributes(__name__, _LAZY)


__all__ = [
    "ActivePredictor",
    "LayerPredictor",
    "LayerPredictorStats",
    "ModelShape",
    "OraclePredictorSet",
    "PredictorBase",
    "PredictorSet",
    "build_predictors",
    "overall_metrics",
    "predictor_cache_key",
    "predictor_report",
    "strategy_metrics",
    "write_stats_csv",
]
