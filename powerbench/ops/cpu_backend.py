"""Compiled CPU backend: C++ extension, parallel across neurons, AVX2/FMA, F16C for fp16.

Kernels live in ``csrc/sparse_cpu_kernels.cpp``; they run on ``torch.get_num_threads()``
workers of the work-claiming pool in ``csrc/thread_pool.cpp`` (see the README for why not
OpenMP). Index range/uniqueness checks run in C++ (O(n), no extra torch ops).
"""

from __future__ import annotations

import torch

from powerbench.ops.build import load_cpu_extension
from powerbench.ops.errors import BackendUnavailable, summarize
from powerbench.ops.interface import SparseOps
from powerbench.ops.weights import GATED_KINDS, ReluFFNWeights

SUPPORTED_CAPABILITIES = ("AVX2", "AVX512")


def cpu_capability() -> str:
    return torch.backends.cpu.get_cpu_capability()


class CpuSparseOps(SparseOps):
    name = "sparse_cpu"
    device = "cpu"
    validates_in_python = False

    def __init__(self) -> None:
        ops = torch.ops.powerbench_cpu
        self._row_op = ops.row.default
        self._axpy_op = ops.axpy.default
        self._ffn_relu_op = ops.ffn_relu.default
        self._ffn_gated_op = ops.ffn_gated.default
        self._ffn_relu_predicted_op = ops.ffn_relu_predicted.default
        self._ffn_gated_predicted_op = ops.ffn_gated_predicted.default
        self._ffn_gated_threshold_op = ops.ffn_gated_threshold.default
        self._linear_op = ops.linear.default
        self._read_sum_op = ops.read_bandwidth_sum.default
        self._threads_used_op = ops.threads_used.default

    @classmethod
    def create(cls) -> CpuSparseOps:
        capability = cpu_capability()
        if capability not in SUPPORTED_CAPABILITIES:
            raise BackendUnavailable(
                f"CPU lacks AVX2/FMA/F16C (torch reports capability {capability})")
        try:
            load_cpu_extension()
        except Exception as err:  # a compiler error, missing ninja, ...
            raise BackendUnavailable(f"C++ extension build failed: {summarize(err)}") from err
        return cls()

    def _row(self, w, x, idx, scatter, bias, relu, check):
        return self._row_op(w, x, idx, bias, relu, scatter, check)

    def _axpy(self, w_t, coeffs, idx, check):
        return self._axpy_op(w_t, coeffs, idx, None, check)

    def _ffn_relu(self, x, w1, b1, w2_t, b2, idx, check):
        return self._ffn_relu_op(x, w1, b1, w2_t, b2, idx, check)

    def _ffn_gated(self, x, w_gate, w_up, w_down_t, idx, kind, check):
        return self._ffn_gated_op(x, w_gate, w_up, w_down_t, idx, GATED_KINDS.index(kind), check)

    def _prepare_ffn_predicted(self, weights, predictor):
        p = predictor
        head = (p.w1, p.b1, p.w2_t, p.b2, float(p.threshold), p.hidden_relu)
        if isinstance(weights, ReluFFNWeights):
            op, tail = self._ffn_relu_predicted_op, (weights.w1, weights.b1, weights.w2_t,
                                                     weights.b2)
        else:
            op, tail = self._ffn_gated_predicted_op, (weights.w_gate, weights.w_up,
                                                      weights.w_down_t,
                                                      GATED_KINDS.index(weights.kind))
        return lambda x: op(x, *head, *tail)

    def _prepare_ffn_gate_threshold(self, weights, threshold):
        op, kind = self._ffn_gated_threshold_op, GATED_KINDS.index(weights.kind)
        w, t = (weights.w_gate, weights.w_up, weights.w_down_t), float(threshold)
        return lambda x: op(x, *w, t, kind)

    def prepare_linear(self):
        """The C++ dense kernel itself (``fn(x, w, bias)``): rows of ``w`` streamed by the
        pool, fp32 accumulation; x and bias of any float dtype, y in x's dtype."""
        return self._linear_op

    def read_sum(self, buf: torch.Tensor) -> float:
        """Sum of a contiguous fp32 buffer read by all threads (bandwidth probe)."""
        return self._read_sum_op(buf)

    def threads_used(self) -> int:
        """Workers that took part in a 100 ms probe job (follows ``torch.set_num_threads``)."""
        return self._threads_used_op()

