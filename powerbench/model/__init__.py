"""Model specs (shape-only) and loaders for real checkpoints."""

from powerbench.model.spec import (
    BYTES_PER_PARAM,
    FFNKind,
    ModelSpec,
    SparsityStats,
    WeightDType,
    bytes_per_param,
)

__all__ = [
    "BYTES_PER_PARAM",
    "FFNKind",
    "ModelSpec",
    "SparsityStats",
    "WeightDType",
    "bytes_per_param",
]
