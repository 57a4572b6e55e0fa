"""Reference backend in plain torch: gather the active rows (index_select), then matmul.

Works on any device torch supports. Gathered rows are converted to fp32 so accumulation is
fp32 for every storage dtype, like the compiled backends.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from powerbench.ops.interface import SparseOps


def _rows(w: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    return w.index_select(0, idx).float()


def gated_activation(g: torch.Tensor, u: torch.Tensor, kind: str) -> torch.Tensor:
    if kind == "reglu":
        return F.relu(g) * u
    if kind == "drelu":
        return F.relu(g) * F.relu(u)
    return F.silu(g) * u


class TorchSparseOps(SparseOps):
    name = "sparse_torch"
    device = "cpu"

    def __init__(self, device: str = "cpu") -> None:
        self.device = device  # type: ignore[misc]  # instance override of the class default

    def _row(self, w, x, idx, scatter, bias, relu, check):
        y = x.float() @ _rows(w, idx).t()
        if bias is not None:
            y = y + bias.float().index_select(0, idx)
        if relu:
            y = F.relu(y)
        if not scatter:
            return y
        out = torch.zeros(x.shape[0], w.shape[0], dtype=torch.float32, device=w.device)
        out[:, idx] = y
        return out

    def _axpy(self, w_t, coeffs, idx, check):
        return coeffs.float() @ _rows(w_t, idx)

    def _ffn_relu(self, x, w1, b1, w2_t, b2, idx, check):
        h = self._row(w1, x, idx, False, b1, True, False)
        y = h @ _rows(w2_t, idx)
        return y if b2 is None else y + b2.float()

    def _ffn_gated(self, x, w_gate, w_up, w_down_t, idx, kind, check):
        xf = x.float()
        g = xf @ _rows(w_gate, idx).t()
        u = xf @ _rows(w_up, idx).t()
        return gated_activation(g, u, kind) @ _rows(w_down_t, idx)
