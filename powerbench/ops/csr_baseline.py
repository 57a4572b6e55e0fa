"""A conventional sparse operator: the baseline PowerInfer's Fig. 16 compares against.

The paper's set-up zeroes the inactive neurons' rows of a weight matrix and hands it to a
general sparse library ("PyTorch sparse"). Here that library is torch's sparse CSR product
(Intel MKL's on x86): the weight with only the active rows kept (for the down matrix, the
active columns of W_down), stored as CSR, times the dense activations.

What that costs, and why it loses to dense until high sparsity: CSR keeps a column index
beside every stored value, so with torch's default int64 indices an fp32 weight costs
4 + 8 bytes instead of 4, and the kernel cannot know that every stored row is whole.
`index_dtype=torch.int32` halves the index bytes (MKL takes either).

Building the CSR matrices is not timed: the conventional library is given the sparse matrix,
as the paper's rows are zeroed beforehand. A runtime whose active set changes every token
would pay the conversion per token as well; leaving it out favours this baseline.

Memory: the CSR copies hold 12 (int64) or 8 (int32) bytes per active fp32 weight, beside the
dense matrices (at 0% sparsity, 2.3 GB for a 4096x16384 gated FFN with int64 indices).

torch's CPU CSR product exists for fp32 and fp64 only: `supports(dtype)` says whether a
storage dtype can run, and the benchmark leaves the others out with that reason.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from powerbench.ops.huge_pages import use_huge_pages_all

if TYPE_CHECKING:
    from powerbench.ops.bench import LayerData

CSR_DTYPES = (torch.float32, torch.float64)  # what torch's CPU CSR x dense product takes


def _csr(crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor, shape: tuple[int, int],
         huge_pages: bool) -> torch.Tensor:
    if huge_pages:  # as the dense and sparse operators' weights (ops.huge_pages)
        use_huge_pages_all([crow, col, values])
    with warnings.catch_warnings():  # torch's "Sparse CSR tensor support is in beta state"
        warnings.filterwarnings("ignore", "Sparse CSR tensor support", UserWarning)
        # valid by construction (the tests check the invariants): no O(nnz) check per build
        return torch.sparse_csr_tensor(crow, col, values, shape, check_invariants=False)


def csr_rows(w: torch.Tensor, idx: torch.Tensor, index_dtype: torch.dtype = torch.int64,
             huge_pages: bool = False) -> torch.Tensor:
    """`w` [n, k] with only the rows `idx` stored (the others empty), as CSR."""
    n, k = w.shape
    ids = idx.long()
    counts = torch.zeros(n, dtype=torch.int64)
    counts[ids] = k
    crow = torch.cat([counts.new_zeros(1), counts.cumsum(0)]).to(index_dtype)
    order = ids.sort().values  # CSR stores rows in order
    col = torch.arange(k, dtype=index_dtype).repeat(order.numel())
    return _csr(crow, col, w.index_select(0, order).reshape(-1).contiguous(), (n, k), huge_pages)


def csr_columns(w_t: torch.Tensor, idx: torch.Tensor, index_dtype: torch.dtype = torch.int64,
                huge_pages: bool = False) -> torch.Tensor:
    """W = `w_t`^T [k, n] with only the columns `idx` stored, as CSR (every row holds them)."""
    n, k = w_t.shape
    order = idx.long().sort().values
    crow = torch.arange(0, k + 1, dtype=torch.int64).mul_(order.numel()).to(index_dtype)
    col = order.to(index_dtype).repeat(k)
    values = w_t.index_select(0, order).t().contiguous().reshape(-1)
    return _csr(crow, col, values, (k, n), huge_pages)


def supports(dtype: torch.dtype) -> bool:
    return dtype in CSR_DTYPES


class ConventionalSparse:
    """The CSR baseline as a bench-operators contender: `fn(op, layer, x, coeffs, idx)`
    builds the CSR matrices for that active set (untimed) and returns the timed call."""

    def __init__(self, index_dtype: torch.dtype = torch.int64, huge_pages: bool = True) -> None:
        self.index_dtype = index_dtype
        self.huge_pages = huge_pages

    def rows(self, w: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return csr_rows(w, idx, self.index_dtype, self.huge_pages)

    def columns(self, w_t: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return csr_columns(w_t, idx, self.index_dtype, self.huge_pages)

    def fn(self, op: str, layer: LayerData, x: torch.Tensor, coeffs: torch.Tensor,
           idx: torch.Tensor) -> Callable[[], torch.Tensor]:
        """The op with the active set `idx` (x [batch, d_model]; coeffs [batch, >= n_active],
        the first n_active per active neuron in idx's order, as the sparse operators take
        them). Outputs: row [batch, d_ffn] (zero where inactive), the others [batch, d_model]."""
        if not supports(layer.w_gate.dtype):
            raise TypeError(f"torch's CPU CSR product takes {', '.join(map(str, CSR_DTYPES))}, "
                            f"not {layer.w_gate.dtype}")
        xt = x.t().contiguous()
        if op == "row":
            gate = self.rows(layer.w_gate, idx)
            return lambda: (gate @ xt).t()
        down = self.columns(layer.w_down_t, idx)
        if op == "axpy":
            ids = idx.long()
            full = torch.zeros(layer.w_gate.shape[0], x.shape[0], dtype=coeffs.dtype)
            full[ids] = coeffs[:, : ids.numel()].t()
            return lambda: (down @ full).t()
        gate = self.rows(layer.w_gate, idx)
        if op == "ffn_relu":
            b1, b2 = layer.b1.to(x.dtype)[:, None], layer.b2.to(x.dtype)
            return lambda: (down @ torch.relu(gate @ xt + b1)).t() + b2
        up = self.rows(layer.w_up, idx)
        return lambda: (down @ (torch.relu(gate @ xt) * (up @ xt))).t()
