"""Activation predictors: per-layer active-neuron predictors, their sizing strategies
(fixed / adaptive / oracle / none), training, thresholds and statistics.

Importing this package needs torch only (the engine's constraint); the config-driven
builders (`build_predictors`, `predictor_report`, `strategy_metrics`) load lazily.
"""

from powerbench.build import lazy_attributes
from powerbench.predictor.model import LayerPredictor
from powerbench.predictor.oracle import OraclePredictorSet
from powerbench.predictor.predictor_set import (
    ActivePredictor,
    ModelShape,
    PredictorBase,
    PredictorSet,
)
from powerbench.predictor.stats import LayerPredictorStats, overall_metrics, write_stats_csv

_LAZY = {
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
