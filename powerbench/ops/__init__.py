"""Neuron-aware sparse operators (PowerInfer-style): compute only the active neurons, each
read as one contiguous weight row, behind one interface with three backends.

>>> from powerbench.ops import get_backend
>>> ops = get_backend("sparse_cpu")          # falls back to sparse_torch with one warning
>>> y = ops.ffn_relu(x, w1, b1, w2_t, b2, idx)  # x [batch, d_model], idx int32/int64 ids

See :mod:`powerbench.ops.interface` for the conventions (layouts, union active set,
dtypes) and :mod:`powerbench.ops.weights` to prepare HF weights once.
Every name loads on first use (torch then; the extensions on their first call), so the
registry's backend names import without torch.
"""

from powerbench.build import lazy_attributes

_LAZY = {
    "BackendUnavailable": "powerbench.ops.errors",
    "CpuIsaError": "powerbench.ops.errors",
    "Active": "powerbench.ops.interface",
    "SparseOps": "powerbench.ops.interface",
    "Threshold": "powerbench.ops.interface",
    "BACKENDS": "powerbench.ops.registry",
    "available_backends": "powerbench.ops.registry",
    "clear_cache": "powerbench.ops.registry",
    "get_backend": "powerbench.ops.registry",
    "GATED_KINDS": "powerbench.ops.weights",
    "GatedFFNWeights": "powerbench.ops.weights",
    "PredictorWeights": "powerbench.ops.weights",
    "ReluFFNWeights": "powerbench.ops.weights",
    "prepare_gated_ffn": "powerbench.ops.weights",
    "prepare_relu_ffn": "powerbench.ops.weights",
}

__getattr__ = lazy_attributes(__name__, _LAZY)

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
