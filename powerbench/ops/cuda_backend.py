"""Compiled CUDA backend: warp-per-row *row* kernels and a block-split *axpy* whose splits
meet in an fp32 workspace (the last block of a column tile writes the result).

Kernels are in ``csrc/sparse_cuda_kernels.cu`` (plain CUDA), the torch binding in
``csrc/sparse_cuda_binding.cpp``. The active set stays on the device: an id tensor, or a
:class:`~powerbench.ops.interface.Threshold` whose scores are tested inside the kernels, so a
layer needs no device->host copy. ``check=True`` validates ids with torch ops and therefore
synchronises; pass ``check=False`` in the decode loop.
"""

from __future__ import annotations

import torch

from powerbench.ops.checks import validate_ids
from powerbench.ops.errors import BackendUnavailable, summarize
from powerbench.ops.extension_build import load_cuda_extension
from powerbench.ops.interface import SparseOps, Threshold
from powerbench.ops.weights import GATED_KINDS


def _split(active: torch.Tensor | Threshold) -> tuple[torch.Tensor | None, torch.Tensor | None,
                                                       float]:
    if isinstance(active, Threshold):
        return None, active.scores, float(active.threshold)
    return active, None, 0.0


def _batch(x) -> bool:
    """x is a [batch, features] tensor (a 1-D x goes through the generic path)."""
    return type(x) is torch.Tensor and x.dim() == 2


class CudaSparseOps(SparseOps):
    name = "sparse_cuda"
    device = "cuda"
    device_threshold = True
    validates_in_python = False  # done below, only when asked (it synchronises)
    self_checking = True

    def __init__(self) -> None:
        ops = torch.ops.powerbench_cuda
        self._row_op = ops.row.default
        self._axpy_op = ops.axpy.default
        self._ffn_relu_op = ops.ffn_relu.default
        self._ffn_gated_op = ops.ffn_gated.default

    @classmethod
    def create(cls) -> CudaSparseOps:
        if not torch.cuda.is_available():
            build = torch.version.cuda or "CPU-only"
            raise BackendUnavailable(f"no CUDA device (torch {torch.__version__}, {build} build)")
        try:
            load_cuda_extension()
        except Exception as err:
            raise BackendUnavailable(f"CUDA extension build failed: {summarize(err)}") from err
        return cls()

    # self_checking: with an id tensor, a 2-D x and check=False (the decode loop), the public
    # operators go straight to the hooks and the C++ op: it checks every argument itself
    # (same error types) and returns y in x's dtype (coeffs' for axpy), so a call is one
    # dispatch and its kernels, with no Python checks and no conversion. Everything else
    # takes the generic path (ids are range-checked here, which synchronises).
    def _direct_ok(self, x, idx, check):
        return super()._direct_ok(x, idx, check) and not check and _batch(x)

    @staticmethod
    def _checked(active, limit: int, check: bool):
        if check and not isinstance(active, Threshold):
            validate_ids(active, limit)
        return _split(active)

    def _row(self, w, x, idx, scatter, bias, relu, check):
        ids, scores, thr = self._checked(idx, w.shape[0], check)
        return self._row_op(w, x, ids, scores, thr, bias, relu, scatter)

    def _axpy(self, w_t, coeffs, idx, check):
        ids, scores, thr = self._checked(idx, w_t.shape[0], check)
        return self._axpy_op(w_t, coeffs, ids, scores, thr, None)

    def _ffn_relu(self, x, w1, b1, w2_t, b2, idx, check):
        ids, scores, thr = self._checked(idx, w1.shape[0], check)
        return self._ffn_relu_op(x, w1, b1, w2_t, b2, ids, scores, thr)

    def _ffn_gated(self, x, w_gate, w_up, w_down_t, idx, kind, check):
        ids, scores, thr = self._checked(idx, w_gate.shape[0], check)
        return self._ffn_gated_op(x, w_gate, w_up, w_down_t, ids, scores, thr,
                                  GATED_KINDS.index(kind))
