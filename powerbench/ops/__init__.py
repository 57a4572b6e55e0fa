"""Neuron-aware sparse operators (PowerInfer-style): compute only the active neurons, each
read as one contiguous weight row, behind one interface with three backends.

>>> from powerbench.ops import get_backend
>>> ops = get_backend("sparse_cpu")          # falls back to sparse_torch with one warning
>>> y = ops.ffn_relu(x, w1, b1, w2_t, b2, idx)  # x [batch, d_model], idx int32/int64 ids

See :mod:`powerbench.ops.interface` for the conventions (layouts, union active set,
dtypes) and :mod:`powerbench.ops.weights` to prepare HF weights once.
Importing this package needs torch only; extensions are built on first use.
"""

from powerbench.ops.errors import BackendUnavailable, CpuIsaError
from powerbench.ops.interface import Active, SparseOps, Threshold
from powerbench.ops.registry import BACKENDS, available_backends, clear_cache, get_backend
from powerbench.ops.weights import (
    GATED_KINDS,
    GatedFFNWeights,
    PredictorWeights,
    ReluFFNWeights,
    prepare_gated_ffn,
    prepare_relu_ffn,
)

__all__ = [
    "BACKENDS",
    "GATED_KINDS",
    "Active",
    "BackendUnavailable",
    "CpuIsaError",
    "GatedFFNWeights",
    "PredictorWeights",
    "ReluFFNWeights",
    "SparseOps",
    "Threshold",
    "available_backends",
    "clear_cache",
    "get_backend",
    "prepare_gated_ffn",
    "prepare_relu_ffn",
]
