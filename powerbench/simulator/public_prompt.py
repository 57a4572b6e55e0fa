"""PowerInfer's prompt phase as its public code runs it (`prefill.mode=powerinfer_public`).

`hybrid` charges a prompt pass of P tokens as one batch: each device reads the union of its
active neurons once and computes each token's own (neuron, token) pairs. PowerInfer's public
sparse operators (github.com/SJTU-IPADS/PowerInfer) do not all read that way for a batch:

    CPU up/gate   ggml.c ggml_compute_forward_mul_mat_sparse: rows outside (shared out by an
                  atomic counter), the batch's tokens inside: a row is read once per pass
                  and dotted with every token whose predictor score passes (`once`)
    CPU down      ggml.c ggml_compute_forward_mul_mat_axpy (and _q4_0): tokens outside, each
                  thread's static row range inside: every token re-reads its active rows
                  (`per_token`)
    GPU up/gate   ggml-cuda.cu dequantize_mul_mat_batch_sparse (batch > 1): one warp per
                  row loops over the tokens and re-loads the row for every (row, token)
                  pair that passes (`per_token`), the decode kernel's work once per pair
    GPU down      dequantize_mul_mat_axpy_sparse_batch (batch <= 100 rows, ggml_cuda_axpy):
                  one block per row loops over the tokens, re-loads the row and adds d_model
                  partial sums with global atomicAdd per pair (`per_token`); from 101 rows
                  ggml_cuda_axpy converts ALL the GPU's down rows to fp32 and runs one
                  cuBLAS SGEMM (ggml_cuda_op_mul_mat_transpose_gemm)

`public_prompt_work` rewrites a prompt pass's FFNWork so that the cost model charges those
reads: `*_computed` (what `CostModel.ffn_device` reads, in neurons of `neuron_bytes`) and
`*_token_computed` (its FLOPs, in (neuron, token) pairs) become neuron-equivalents, each
FFN matrix weighted by its share of a neuron (up/gate: (m - 1) / m of the m matrices;
down: 1 / m). A per-token read is charged at the device's decode rate for that operator
(bandwidth x efficiency): on the GPU the re-loads of a row may hit its L2 cache, so there it
is an upper bound of the operators' cost (the union read once is the lower bound, `hybrid`).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from powerbench.model.spec import ModelSpec, bytes_per_param
from powerbench.simulator.config import PublicPromptReads, WeightReads
from powerbench.simulator.workload import FFNWork
from powerbench.solver.placement import Placement

FP32_BYTES = 4.0  # the GEMM path's converted weights (to_fp32_cuda), written then read


def _reads(mode: WeightReads, union: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """Rows read by one operator: the pass's union once, or once per (row, token) pair."""
    return union if mode is WeightReads.once else pairs


def public_prompt_work(work: FFNWork, spec: ModelSpec, placement: Placement, rows: int,
                       reads: PublicPromptReads) -> FFNWork:
    """The prompt pass's FFNWork with `*_computed` = weight rows read and
    `*_token_computed` = (row, token) pairs computed, as neuron-equivalents (module doc)."""
    m = spec.ffn_kind.n_matrices
    up, down = (m - 1) / m, 1.0 / m
    cpu_read = (up * _reads(reads.cpu_up, work.cpu_computed, work.cpu_token_computed)
                + down * _reads(reads.cpu_down, work.cpu_computed, work.cpu_token_computed))
    gpu_up = up * _reads(reads.gpu_up, work.gpu_computed, work.gpu_token_computed)
    if rows > reads.gpu_down_gemm_above_rows:
        # every GPU down row: read in its own format, written and read again as fp32
        held = np.broadcast_to(placement.gpu_counts.astype(np.float64), work.gpu_computed.shape)
        weight = bytes_per_param(placement.weight_dtype)
        gpu_read = gpu_up + down * held * (weight + 2 * FP32_BYTES) / weight
        gpu_pairs = up * work.gpu_token_computed + down * held * rows
    else:
        gpu_read = gpu_up + down * _reads(reads.gpu_down, work.gpu_computed,
                                          work.gpu_token_computed)
        gpu_pairs = work.gpu_token_computed
    return replace(work, gpu_computed=gpu_read, cpu_computed=cpu_read,
                   gpu_token_computed=gpu_pairs)
