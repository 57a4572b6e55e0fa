"""Compiled CPU backend: C++ extension, parallel across neurons, one ISA path per CPU
(AVX-512 with or without AVX512-BF16, AVX2/FMA/F16C or portable C++, chosen at load:
:mod:`powerbench.ops.isa`), with run-time tuning knobs (:mod:`powerbench.ops.cpu_knobs`).

Kernels live in ``csrc/sparse_cpu_kernels_impl.h`` (compiled once per path, see
``csrc/cpu_isa.h``); they run on ``torch.get_num_threads()`` workers of the work-claiming
pool in ``csrc/thread_pool.cpp`` (see the README for why not OpenMP). Index range/uniqueness
checks run in C++ (O(n), no extra torch ops).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from powerbench.ops.cpu_knobs import KnobSpec, check_knobs, knob_specs, knob_vector
from powerbench.ops.errors import BackendUnavailable, summarize
from powerbench.ops.extension_build import load_cpu_extension
from powerbench.ops.interface import SparseOps
from powerbench.ops.isa import choose_isa, requested_isa
from powerbench.ops.weights import GATED_KINDS, ReluFFNWeights

PROBE_MODES = ("slots", "runs", "wide")  # the gather probe's ways of reading (csrc: ProbeMode)


class CpuSparseOps(SparseOps):
    name = "sparse_cpu"
    device = "cpu"
    validates_in_python = False
    self_checking = True
    writes_out = True

    def __init__(self) -> None:
        # the extension module's own functions (pybind11): the C++ ops without the torch
        # dispatcher's path, all arguments positional (csrc/sparse_cpu_binding.cpp, end)
        ops = load_cpu_extension()
        self._row_op = ops.row
        self._axpy_op = ops.axpy
        self._ffn_relu_op = ops.ffn_relu
        self._ffn_gated_op = ops.ffn_gated
        self._ffn_relu_predicted_op = ops.ffn_relu_predicted
        self._ffn_gated_predicted_op = ops.ffn_gated_predicted
        self._ffn_gated_threshold_op = ops.ffn_gated_threshold
        self._linear_op = ops.linear
        self._read_sum_op = ops.read_bandwidth_sum
        self._threads_used_op = torch.ops.powerbench_cpu.threads_used.default
        self._gather_probe_op = ops.gather_probe

    @classmethod
    def create(cls) -> CpuSparseOps:
        """Build/load the extension and select the ISA path ($POWERBENCH_CPU_ISA or the
        best); an unknown or unsupported path raises :class:`CpuIsaError`."""
        requested = requested_isa()  # a bad setting fails before any build
        try:
            load_cpu_extension()
        except Exception as err:  # a compiler error, missing ninja, ...
            raise BackendUnavailable(f"C++ extension build failed: {summarize(err)}") from err
        ops = torch.ops.powerbench_cpu
        ops.set_cpu_isa(choose_isa(requested, list(ops.cpu_isas())))
        return cls()

    @property
    def isa(self) -> str:
        """The ISA path the kernels run ("avx512_bf16", "avx512", "avx2" or "portable")."""
        return torch.ops.powerbench_cpu.cpu_isa()

    @staticmethod
    def supported_isas() -> list[str]:
        """The paths this CPU can run, best first."""
        return list(torch.ops.powerbench_cpu.cpu_isas())

    def select_isa(self, name: str | None) -> str:
        """Switch every CPU kernel (this process) to path ``name`` (None: the best) and
        return it; :class:`CpuIsaError` if unknown or unsupported. For side-by-side runs
        of the paths (tests, benchmarks); the environment variable sets it at load."""
        isa = choose_isa(requested_isa(name or "auto"), self.supported_isas())
        torch.ops.powerbench_cpu.set_cpu_isa(isa)
        return isa

    @staticmethod
    def knob_specs() -> tuple[KnobSpec, ...]:
        """The kernels' run-time tuning knobs (csrc/cpu_knobs.h): name, default, range."""
        ops = torch.ops.powerbench_cpu
        return knob_specs(list(ops.cpu_knob_names()), list(ops.cpu_knob_ranges()))

    def knobs(self) -> dict[str, int]:
        """Every knob's current value."""
        names = [s.name for s in self.knob_specs()]
        return dict(zip(names, torch.ops.powerbench_cpu.cpu_knobs(), strict=True))

    def set_knobs(self, values: dict[str, int]) -> dict[str, int]:
        """Set the named knobs (the others back to their defaults) for every later call in
        this process; returns the values before. :class:`CpuKnobError` for an unknown name
        or a value outside its range (nothing is changed then)."""
        specs = self.knob_specs()
        check_knobs(values, specs)
        before = self.knobs()
        torch.ops.powerbench_cpu.set_cpu_knobs(knob_vector(values, specs))
        return before

    # self_checking: the public operators go straight to the C++ op for an id tensor (it
    # checks every argument itself and returns y in x's dtype and shape), so a decode-path
    # call is one call of the extension module (no dispatcher: see __init__). A cold call
    # (after the weights streamed through the cache) spent ~30 us in the Python checks alone
    # on the 2-core EPYC host, as long as reading 1 MB of weights. Threshold active sets (and
    # anything that is not a tensor) take the generic path. The FFN hooks return fp32
    # (prepare_ffn); a direct call asks for x's dtype. `out` goes to the C++ op, which
    # writes the result into it (no allocation in the call).
    def _row_direct(self, w, x, idx, scatter, bias, relu, check, out):
        return self._row_op(w, x, idx, bias, relu, scatter, check, out)

    def _axpy_direct(self, w_t, coeffs, idx, check, out):
        return self._axpy_op(w_t, coeffs, idx, None, check, out)

    def _ffn_relu_direct(self, x, w1, b1, w2_t, b2, idx, check, out):
        return self._ffn_relu_op(x, w1, b1, w2_t, b2, idx, check, True, out)

    def _ffn_gated_direct(self, x, w_gate, w_up, w_down_t, idx, kind, check, out):
        return self._ffn_gated_op(x, w_gate, w_up, w_down_t, idx, GATED_KINDS.index(kind),
                                  check, True, out)

    def _row(self, w, x, idx, scatter, bias, relu, check):
        return self._row_op(w, x, idx, bias, relu, scatter, check)

    def _axpy(self, w_t, coeffs, idx, check):
        return self._axpy_op(w_t, coeffs, idx, None, check)

    def _ffn_relu(self, x, w1, b1, w2_t, b2, idx, check):
        return self._ffn_relu_op(x, w1, b1, w2_t, b2, idx, check, False)

    def _ffn_gated(self, x, w_gate, w_up, w_down_t, idx, kind, check):
        return self._ffn_gated_op(x, w_gate, w_up, w_down_t, idx, GATED_KINDS.index(kind), check,
                                  False)

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

    def _linear_into(self, x, w, bias, out):
        return self._linear_op(x, w, bias, out)

    def prepare_linear(self):
        """The C++ dense kernel itself (``fn(x, w, bias)``): rows of ``w`` streamed by the
        pool, fp32 accumulation; x and bias of any float dtype, y in x's dtype."""
        return self._linear_op

    def read_sum(self, buf: torch.Tensor) -> float:
        """Sum of a contiguous fp32 buffer read by all threads (bandwidth probe)."""
        return self._read_sum_op(buf)

    def gather_probe(self, mats: Sequence[torch.Tensor], idx: torch.Tensor, mode: str = "slots",
                     *, check: bool = True) -> int:
        """Read rows ``idx`` of every matrix in ``mats`` (2-D, contiguous, any dtype, the
        same row count) as a sparse operator reads them, with plain vector loads and nothing
        else, on the operators' threads: the machine's ceiling for that gather
        (``csrc/gather_probe_impl.h``). ``mode``: ``"slots"`` (the operators' 4-slot
        schedule), ``"wide"`` (the same with 8 slots on AVX-512) or ``"runs"`` (runs of
        adjacent rows merged, one stream per thread).
        Returns the sum modulo 2**32 of each row's bytes as little-endian 32-bit words (a
        last partial word zero-padded)."""
        if mode not in PROBE_MODES:
            raise ValueError(f"gather probe mode must be one of {list(PROBE_MODES)}, got {mode!r}")
        return self._gather_probe_op(list(mats), idx, PROBE_MODES.index(mode), check)

    def threads_used(self) -> int:
        """Workers that took part in a 100 ms probe job (follows ``torch.set_num_threads``)."""
        return self._threads_used_op()

