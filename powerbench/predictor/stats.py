"""Per-layer predictor statistics, the per-layer CSV table and the overall metrics."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

from powerbench.predictor.threshold import Confusion


@dataclass
class LayerPredictorStats:
    """One layer's predictor, measured on the held-out test split of the profile samples.

    recall / precision / predicted_active_fraction are micro-averaged over (token,
    neuron) pairs at the tuned threshold; tp / positives / predicted / total are the
    counts behind them (so layers aggregate exactly).
    """

    layer: int
    rank: int
    threshold: float
    target_recall: float
    recall: float
    precision: float
    predicted_active_fraction: float
    true_active_fraction: float
    tp: int
    positives: int
    predicted: int
    total: int
    param_count: int
    param_bytes: float
    train_s: float
    epochs: int
    val_loss: float
    sparsity: float  # from the profile (all profiled tokens)
    skew: float  # share of neurons covering 80% of activations (profile)
    initial_rank: int = 0

    @property
    def confusion(self) -> Confusion:
        return Confusion(self.tp, self.positives, self.predicted, self.total)

    def to_dict(self) -> dict:
        return asdict(self)


def write_stats_csv(stats: Sequence[LayerPredictorStats], path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    names = [f.name for f in fields(LayerPredictorStats)]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=names)
        writer.writeheader()
        for row in stats:
            writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v)
                             for k, v in row.to_dict().items()})
    return path


def overall_metrics(stats: Sequence[LayerPredictorStats], model_params: int) -> dict[str, float]:
    """MLflow metrics over all layers (recall etc. pooled over every layer's test pairs).

    predictor_param_share = predictor parameters / model parameters (equal to the byte
    share when both are stored in the same dtype).
    """
    if not stats:
        return {}
    total = sum((s.confusion for s in stats), Confusion(0, 0, 0, 0))
    params = sum(s.param_count for s in stats)
    return {
        "predictor_recall": total.recall,
        "predictor_recall_min": min(s.recall for s in stats),
        "predictor_precision": total.precision,
        "predicted_active_fraction": total.predicted_active_fraction,
        "true_active_fraction": total.true_active_fraction,
        "predictor_param_count": float(params),
        "predictor_param_bytes": float(sum(s.param_bytes for s in stats)),
        "predictor_param_share": params / max(model_params, 1),
        "predictor_train_s": float(sum(s.train_s for s in stats)),
        "predictor_mean_rank": sum(s.rank for s in stats) / len(stats),
    }


def predictor_layer_bytes(predictors: object | None) -> np.ndarray | None:
    """Per-layer parameter bytes of trained or sized predictors (None: none to charge)."""
    stats = list(getattr(predictors, "stats", None) or [])
    if not stats:
        return None
    return np.array([float(s.param_bytes) for s in stats], dtype=np.float64)
