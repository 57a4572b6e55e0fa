"""The neuron-aware sparse operator interface every backend implements.

Conventions (all backends):

* Weights are neuron-major: ``w``/``w1``/``w_gate``/``w_up`` are ``[d_ffn, d_model]`` as
  HF stores fc1/gate/up, and the down projection is stored *transposed*,
  ``w_t``/``w2_t``/``w_down_t`` = ``[d_ffn, d_model]``, so one neuron's weights are one
  contiguous row in every matrix. Storage is fp32, fp16 or bf16; accumulation is fp32.
* ``x`` is ``[batch, d_model]`` (or ``[d_model]`` for one token), any float dtype; results
  come back in ``x``'s dtype (``coeffs``'s for :meth:`SparseOps.axpy`) and shape.
* The active set ``idx`` is a 1-D int32/int64 tensor of distinct neuron ids in any order
  (sorted ids read memory in order and are a little faster). For a batch it is the
  **union** over the tokens: every listed neuron is computed exactly for every token (a
  ReLU still zeroes the tokens where the neuron is not active), every other neuron is
  treated as zero for all tokens.
* Instead of an id list, ``idx`` may be a :class:`Threshold` (predictor scores and a
  threshold, active = ``scores > threshold``). The CUDA backend applies it on the device
  inside the kernels (no host round trip); the others turn it into ids. With a Threshold
  the ``row`` output is always scattered ``[batch, d_ffn]`` and ``axpy`` takes full
  ``[batch, d_ffn]`` coefficients.
* ``out=`` (every operator, :meth:`SparseOps.linear` too) takes a tensor of the result's
  dtype and shape to write the result into; the call returns it and allocates nothing
  (sparse_cpu writes it in place; other backends compute, then copy). A decode loop or a
  benchmark allocates its results once this way: on sparse_cpu a cold call's allocation
  of its result cost 12-17 us, as long as reading ~0.5 MB of weights.
* ``check=True`` (default) validates ids: out-of-range -> IndexError, repeated -> ValueError,
  wrong dtype -> TypeError. On CUDA this check synchronises with the device; pass
  ``check=False`` in a decode loop once the predictor is trusted.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch

from powerbench.ops.checks import (
    as_batch,
    check_index_type,
    check_out,
    check_same,
    check_vector,
    check_weight,
    validate_ids,
)
from powerbench.ops.weights import (
    GATED_KINDS,
    GatedFFNWeights,
    PredictorWeights,
    ReluFFNWeights,
)


@dataclass(frozen=True)
class Threshold:
    """Active set given as predictor scores: neuron i is active iff ``scores[i] > threshold``."""

    scores: torch.Tensor
    threshold: float = 0.0


Active = torch.Tensor | Threshold


def _like(b: torch.Tensor | None, w: torch.Tensor) -> torch.Tensor | None:
    return None if b is None else b.to(w.dtype)


def _finish(y: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    if like.dim() == 1:
        y = y.squeeze(0)
    return y if y.dtype == like.dtype else y.to(like.dtype)


def _into(y: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    """y, or (with the caller's ``out``, checked against y) y copied into out."""
    if out is None:
        return y
    check_out(out, y)
    return out.copy_(y)


def _torch_linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None
                  ) -> torch.Tensor:
    """``F.linear`` (in fp32 when x and w differ in dtype), the result in ``x``'s dtype."""
    if x.dtype == w.dtype:
        return torch.nn.functional.linear(x, w, _like(bias, w))
    y = torch.nn.functional.linear(x.float(), w.float(), None if bias is None else bias.float())
    return y.to(x.dtype)


class SparseOps(ABC):
    """Public operator methods: argument checks here, the arithmetic in ``_row`` etc."""

    name: ClassVar[str]
    device: ClassVar[str]
    #: the backend consumes a Threshold directly (else it is turned into ids first)
    device_threshold: ClassVar[bool] = False
    #: the backend's compiled ops check every argument themselves (same error types and
    #: messages as the Python checks) and return y in x's dtype and shape (coeffs' for axpy):
    #: a public call that :meth:`_direct_ok` accepts goes straight to the backend hook, one
    #: dispatch with no Python checks (a cold call spent ~30 us in them on sparse_cpu)
    self_checking: ClassVar[bool] = False
    #: the backend writes an ``out=`` tensor in place (else the result is computed, then
    #: copied into it: no saving, so a caller that only wants speed passes none)
    writes_out: ClassVar[bool] = False

    # ---------------------------------------------------------------- public API
    def row(
        self,
        w: torch.Tensor,
        x: torch.Tensor,
        idx: Active,
        scatter: bool = False,
        *,
        bias: torch.Tensor | None = None,
        relu: bool = False,
        check: bool = True,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``y[b, j] = act(w[idx[j]] . x[b] + bias[idx[j]])``.

        Compact ``[batch, len(idx)]`` (column j for ``idx[j]``), or with ``scatter`` the
        full ``[batch, d_ffn]`` with zeros for inactive neurons.
        """
        if self._direct_ok(x, idx, check):
            return self._row_direct(w, x, idx, scatter, bias, relu, check, out)
        check_weight(w, "w", self.device)
        x2 = as_batch(x, w.shape[1], "x", self.device)
        check_vector(bias, w.shape[0], "bias", self.device)
        ids, scatter = self._active(idx, w.shape[0], scatter, check)
        return _into(_finish(self._row(w, x2, ids, scatter, bias, relu, check), x), out)

    def axpy(
        self, w_t: torch.Tensor, coeffs: torch.Tensor, idx: Active, *, check: bool = True,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``y[b] = sum_j coeffs[b, j] * w_t[idx[j]]`` -> ``[batch, d_model]``.

        ``coeffs`` is compact ``[batch, len(idx)]`` (``[batch, d_ffn]`` with a Threshold).
        """
        if self._direct_ok(coeffs, idx, check):
            return self._axpy_direct(w_t, coeffs, idx, check, out)
        check_weight(w_t, "w_t", self.device)
        if isinstance(idx, Threshold):
            n_cols = w_t.shape[0]
        else:
            check_index_type(idx, self.device)
            n_cols = idx.shape[0]
        c2 = as_batch(coeffs, n_cols, "coeffs", self.device)
        ids, _ = self._active(idx, w_t.shape[0], True, check)
        if isinstance(idx, Threshold) and not isinstance(ids, Threshold):
            c2 = c2.index_select(1, ids)
        return _into(_finish(self._axpy(w_t, c2, ids, check), coeffs), out)

    def linear(
        self, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None, *,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Dense ``y = x @ w.T + bias`` (every row of ``w [N, K]``), ``x [..., K]`` ->
        ``[..., N]`` in ``x``'s dtype: the matrix-vector product of decode (a few rows of x;
        sparse_cpu streams ``w`` with fp32 accumulation, others use ``F.linear``)."""
        check_weight(w, "w", self.device)
        if x.dim() < 1 or x.shape[-1] != w.shape[1]:
            raise ValueError(f"x must be [..., {w.shape[1]}], got {tuple(x.shape)}")
        check_vector(bias, w.shape[0], "bias", self.device)
        return self._linear_into(x, w, bias, out)

    def prepare_linear(
        self,
    ) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]:
        """:meth:`linear` without per-call checks, ``fn(x, w, bias)`` with ``F.linear``'s
        signature, for a decode loop that calls it for every projection."""
        return _torch_linear

    def ffn_relu(
        self,
        x: torch.Tensor,
        w1: torch.Tensor,
        b1: torch.Tensor | None,
        w2_t: torch.Tensor,
        b2: torch.Tensor | None,
        idx: Active,
        *,
        check: bool = True,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``y = b2 + sum_{i in idx} relu(w1[i] . x + b1[i]) * w2_t[i]`` (OPT fc1 -> fc2)."""
        if self._direct_ok(x, idx, check):
            return self._ffn_relu_direct(x, w1, b1, w2_t, b2, idx, check, out)
        check_weight(w1, "w1", self.device)
        check_same(w1, "w1", w2_t, "w2_t")
        x2 = as_batch(x, w1.shape[1], "x", self.device)
        check_vector(b1, w1.shape[0], "b1", self.device)
        check_vector(b2, w1.shape[1], "b2", self.device)
        ids, _ = self._active(idx, w1.shape[0], False, check)
        return _into(_finish(self._ffn_relu(x2, w1, b1, w2_t, b2, ids, check), x), out)

    def ffn_gated(
        self,
        x: torch.Tensor,
        w_gate: torch.Tensor,
        w_up: torch.Tensor,
        w_down_t: torch.Tensor,
        idx: Active,
        kind: str = "reglu",
        *,
        check: bool = True,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``y = sum_{i in idx} act(g_i) * f(u_i) * w_down_t[i]``, ``g_i = w_gate[i] . x``.

        kind ``reglu``: relu(g) * u; ``drelu``: relu(g) * relu(u); ``swiglu``: silu(g) * u.
        """
        if kind in GATED_KINDS and self._direct_ok(x, idx, check):
            return self._ffn_gated_direct(x, w_gate, w_up, w_down_t, idx, kind, check, out)
        if kind not in GATED_KINDS:
            raise ValueError(f"unknown gated kind {kind!r}; valid: {', '.join(GATED_KINDS)}")
        check_weight(w_gate, "w_gate", self.device)
        check_same(w_gate, "w_gate", w_up, "w_up")
        check_same(w_gate, "w_gate", w_down_t, "w_down_t")
        x2 = as_batch(x, w_gate.shape[1], "x", self.device)
        ids, _ = self._active(idx, w_gate.shape[0], False, check)
        return _into(_finish(self._ffn_gated(x2, w_gate, w_up, w_down_t, ids, kind, check), x),
                     out)

    def ffn(
        self, x: torch.Tensor, weights: ReluFFNWeights | GatedFFNWeights, idx: Active, *,
        check: bool = True, out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Fused FFN for prepared weights (see :mod:`powerbench.ops.weights`)."""
        if isinstance(weights, ReluFFNWeights):
            return self.ffn_relu(x, weights.w1, weights.b1, weights.w2_t, weights.b2, idx,
                                 check=check, out=out)
        return self.ffn_gated(x, weights.w_gate, weights.w_up, weights.w_down_t, idx,
                              weights.kind, check=check, out=out)

    def ffn_predicted(
        self, x: torch.Tensor, weights: ReluFFNWeights | GatedFFNWeights,
        predictor: PredictorWeights,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The layer's predictor and its sparse FFN in one call: ``ids`` = the neurons whose
        logit is >= ``predictor.threshold`` for any token of ``x`` (ascending), ``y`` = the
        FFN over them (fp32 accumulation). Returns ``(y, ids)``."""
        as_batch(x, weights.d_model, "x", self.device)
        y, ids = self.prepare_ffn_predicted(weights, predictor)(x.reshape(-1, weights.d_model))
        return _finish(y, x), ids

    def prepare_ffn_predicted(
        self, weights: ReluFFNWeights | GatedFFNWeights, predictor: PredictorWeights,
    ) -> Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
        """:meth:`ffn_predicted` with the shapes checked once and the weights bound:
        ``fn(x [batch, d_model]) -> (y fp32 [batch, d_model], ids)``, for a decode loop
        (one operator dispatch per layer on sparse_cpu, no per-call Python checks)."""
        if (predictor.d_model, predictor.d_ffn) != (weights.d_model, weights.d_ffn):
            raise ValueError(f"predictor maps {predictor.d_model} -> {predictor.d_ffn}, the "
                             f"FFN is {weights.d_model} -> {weights.d_ffn}")
        return self._prepare_ffn_predicted(weights, predictor)

    def prepare_ffn(
        self, weights: ReluFFNWeights | GatedFFNWeights,
    ) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        """:meth:`ffn` with the weights bound and no per-call checks:
        ``fn(x [batch, d_model], ids int64) -> y [batch, d_model]`` (fp32; sparse_cuda writes
        it in x's dtype), for a decode loop whose ids come from a trusted predictor."""
        if isinstance(weights, ReluFFNWeights):
            w = (weights.w1, weights.b1, weights.w2_t, weights.b2)
            return lambda x, ids: self._ffn_relu(x, *w, ids, False)
        w = (weights.w_gate, weights.w_up, weights.w_down_t, weights.kind)
        return lambda x, ids: self._ffn_gated(x, w[0], w[1], w[2], ids, w[3], False)

    def ffn_gate_threshold(
        self, x: torch.Tensor, weights: GatedFFNWeights, threshold: float,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Threshold (CATS) sparsity of a gated FFN: the gate ``g = w_gate . x`` for every
        neuron, ``a = act(g)``; neuron i is kept for token b iff ``|a[b, i]| > threshold``;
        ``y[b] = sum_{i kept for b} a[b, i] f(u[b, i]) w_down_t[i]`` with only the kept
        neurons' up rows and down columns read. Returns ``(y, ids)``, ids = the neurons kept
        for any token (ascending)."""
        if not isinstance(weights, GatedFFNWeights):
            raise TypeError("gate thresholds need a gated FFN (GatedFFNWeights)")
        as_batch(x, weights.d_model, "x", self.device)
        fn = self.prepare_ffn_gate_threshold(weights, threshold)
        y, ids = fn(x.reshape(-1, weights.d_model))
        return _finish(y, x), ids

    def prepare_ffn_gate_threshold(
        self, weights: GatedFFNWeights, threshold: float,
    ) -> Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
        """:meth:`ffn_gate_threshold` with the weights and threshold bound:
        ``fn(x [batch, d_model]) -> (y fp32 [batch, d_model], ids)`` (one dispatch per layer
        on sparse_cpu)."""
        if not isinstance(weights, GatedFFNWeights):
            raise TypeError("gate thresholds need a gated FFN (GatedFFNWeights)")
        if not threshold >= 0.0:
            raise ValueError(f"threshold must be >= 0, got {threshold}")
        return self._prepare_ffn_gate_threshold(weights, float(threshold))

    def _prepare_ffn_gate_threshold(self, weights, threshold):
        """Generic (any torch device): dense gate, mask, gathered up rows / down columns."""
        wg, wu, wd_t, kind = weights.w_gate, weights.w_up, weights.w_down_t, weights.kind
        linear, F = torch.nn.functional.linear, torch.nn.functional

        def run(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            xf = x.float()  # fp32 accumulation for every storage dtype, like the kernels
            g = linear(xf, wg.float())
            a = F.silu(g) if kind == "swiglu" else F.relu(g)
            keep = a.abs() > threshold
            ids = keep.any(dim=0).nonzero().flatten()
            u = linear(xf, wu.index_select(0, ids).float())
            if kind == "drelu":
                u = F.relu(u)
            h = a.index_select(1, ids) * u * keep.index_select(1, ids)
            return h @ wd_t.index_select(0, ids).float(), ids

        return run

    def _prepare_ffn_predicted(self, weights, predictor):
        """Generic: the predictor in torch, then :meth:`ffn` (backends may fuse both)."""
        p = predictor
        w1, b1, w2, b2 = p.w1, _like(p.b1, p.w1), p.w2_t.t(), _like(p.b2, p.w2_t)
        linear = torch.nn.functional.linear
        ffn = self.prepare_ffn(weights)

        def run(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            hidden = linear(x.to(w1.dtype), w1, b1)
            if p.hidden_relu:
                hidden = torch.relu(hidden)
            ids = (linear(hidden, w2, b2) >= p.threshold).any(dim=0).nonzero().flatten()
            return ffn(x, ids).float(), ids

        return run

    # ---------------------------------------------------------------- helpers
    def _active(
        self, idx: Active, limit: int, scatter: bool, check: bool
    ) -> tuple[torch.Tensor | Threshold, bool]:
        if isinstance(idx, Threshold):
            check_vector(idx.scores, limit, "Threshold.scores", self.device)
            if self.device_threshold:
                return idx, True
            return (idx.scores > idx.threshold).nonzero().flatten(), True
        check_index_type(idx, self.device)
        if check and self.validates_in_python:
            validate_ids(idx, limit)
        return idx, scatter

    #: ids are range/duplicate-checked in Python (False: the backend does it itself)
    validates_in_python: ClassVar[bool] = True

    def _direct_ok(self, x: torch.Tensor, idx: Active, check: bool) -> bool:
        """Whether a public call skips the Python checks: on a :attr:`self_checking`
        backend, for an id tensor (a backend may narrow this further)."""
        return self.self_checking and type(idx) is torch.Tensor

    def _linear_into(self, x, w, bias, out) -> torch.Tensor:
        """The checked :meth:`linear`'s product (into `out` when given)."""
        return _into(self.prepare_linear()(x, w, bias), out)

    # The hooks of a direct call, y in x's dtype (into `out` when given); by default the
    # hooks themselves, then a copy into out (a backend that writes out itself, or whose
    # FFN hooks return fp32 for prepare_ffn, overrides these).
    def _row_direct(self, w, x, idx, scatter, bias, relu, check, out) -> torch.Tensor:
        return _into(self._row(w, x, idx, scatter, bias, relu, check), out)

    def _axpy_direct(self, w_t, coeffs, idx, check, out) -> torch.Tensor:
        return _into(self._axpy(w_t, coeffs, idx, check), out)

    def _ffn_relu_direct(self, x, w1, b1, w2_t, b2, idx, check, out) -> torch.Tensor:
        return _into(self._ffn_relu(x, w1, b1, w2_t, b2, idx, check), out)

    def _ffn_gated_direct(self, x, w_gate, w_up, w_down_t, idx, kind, check, out
                          ) -> torch.Tensor:
        return _into(self._ffn_gated(x, w_gate, w_up, w_down_t, idx, kind, check), out)

    # ---------------------------------------------------------------- backend hooks
    @abstractmethod
    def _row(self, w, x, idx, scatter, bias, relu, check) -> torch.Tensor: ...

    @abstractmethod
    def _axpy(self, w_t, coeffs, idx, check) -> torch.Tensor: ...

    @abstractmethod
    def _ffn_relu(self, x, w1, b1, w2_t, b2, idx, check) -> torch.Tensor: ...

    @abstractmethod
    def _ffn_gated(self, x, w_gate, w_up, w_down_t, idx, kind, check) -> torch.Tensor: ...

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} on {self.device}>"
