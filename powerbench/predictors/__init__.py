"""Activation predictors: per-layer active-neuron predictors, their sizing strategies
(fixed / adaptive / oracle / none), training, thresholds and statistics.

Importing this package needs torch only (the engine's constraint); the config-driven
builders (`build_predictors`, `predictor_report`, `strategy_metrics`) load lazily.
"""

from typing import Any

from powerbench.predictors.model import LayerPredictor
from powerbench.predictors.oracle import OraclePredictorSet
from powerbench.predictors.predictor_set import (
    ActivePredictor,
    ModelShape,
    PredictorBase,
    PredictorSet,
)
from powerbench.predictors.stats import LayerPredictorStats, overall_metrics, write_stats_csv

_LAZY = {
    "build_predictors": "powerbench.predictors.build",
    "predictor_cache_key": "powerbench.predictors.build",
    "predictor_report": "powerbench.predictors.build",
    "prepare_predictors": "powerbench.predictors.build",
    "strategy_metrics": "powerbench.predictors.strategies",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'powerbench.predictors' has no attribute {name!r}")


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
    "prepare_predictors",
    "strategy_metrics",
    "write_stats_csv",
]
