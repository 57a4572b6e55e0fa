"""Operator benchmark: sparse backends against the best dense kernel, measured side by side.

For every shape (``d_model x d_ffn``), storage dtype, batch, op and sparsity it times each
sparse backend and the dense kernels on the full matrices in the same run: ``torch.matmul``
(``torch_dense``) and, on the CPU, our own dense kernel (``ours_dense``, the decoder's
``linear``), calls interleaved in rounds (every contender once per round, in a seeded
random order, after warm-up, cache flushed before each call, see
:mod:`powerbench.ops.bench_timing`). "Dense" for a (op, dtype, batch) is whichever dense
kernel is faster over all its calls; each row's ``dense_time_us`` is that kernel's median
over the calls interleaved with the row's own, and its speedup the median over those rounds
of dense time / its time (:func:`round_quartiles`).
A STREAM-like read probe runs first; achieved GB/s is reported on the bytes actually
touched (active weight rows plus activations), beside the dense kernel's GB/s on its bytes
and the ideal speedup 1 / (1 - s) of reading a fraction 1 - s of the rows at its bandwidth.
On the CPU a read-only gather probe over the same rows, timed in the same rounds, gives
each row the machine's ceiling (:mod:`powerbench.ops.bench_ceiling`).

Data are built so that every neuron in the active set is truly active (x >= 0 and a gate
with positive mean, fc1 bias > 0): a perfect predictor. The compiled kernels skip neurons
whose activation is exactly zero, so with random data they would read fewer rows than the
byte count assumes; here they read exactly the rows counted. Active ids are sorted, as a
predictor's ``nonzero`` returns them. Timed calls use ``check=False`` (the decode path) and,
with ``out_buffers`` (the default), write their results into tensors allocated once per
cell, the dense kernels' (hidden activations included) and sparse_cpu's alike, as a decode
loop's workspace would: a cold call's allocation of its result cost 12-18 us on the 2-core
EPYC host (2026-11-27), 3-4% of a 90%-sparse fp16 call and under 0.5% of the dense one.

``isas`` runs the compiled CPU backend on several of its ISA paths in one run, and
``variants`` with several settings of its run-time knobs (:mod:`powerbench.ops.cpu_knobs`,
e.g. ``prefetch_bytes:4096``, ``spin_us:2000+prewake:1``): one row per path and setting, all
interleaved in the same rounds, so a knob's effect is measured side by side, not across
processes (on the shared VM separate processes differ by up to 1.5x). The switch to a
contender's path and knobs runs before the cache flush, untimed; ``ours_dense`` and
``torch_dense`` run on the path chosen at load with the default knobs.

Run: ``powerbench bench-operators [task.quick=true]`` (powerbench.tasks.bench_operators), or
``python experiments/bench_gpu.py operators [--quick]`` where only torch is installed (a lent GPU).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from powerbench.ops.bandwidth import Bandwidth, cpu_read_bandwidth, cuda_copy_bandwidth
from powerbench.ops.bench_ceiling import ceiling, probe_calls, probe_ops
from powerbench.ops.bench_report import ResultRow, format_row
from powerbench.ops.bench_timing import Call, Timer, TimingPolicy, round_quartiles
from powerbench.ops.cpu_knobs import knob_vector, parse_variant
from powerbench.ops.huge_pages import HugePages, use_huge_pages_all
from powerbench.ops.interface import SparseOps
from powerbench.ops.registry import BACKENDS, get_backend
from powerbench.schema_helpers import parse_shape

SHAPES = ("4096x11008", "4096x16384", "8192x28672")
SPARSITIES = (0.0, 0.1, 0.5, 0.8, 0.9, 0.95, 0.99)
OPS = ("row", "axpy", "ffn_relu", "ffn_gated")
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
DEFAULT_BACKENDS = {"cpu": ("sparse_torch", "sparse_cpu"), "cuda": ("sparse_torch", "sparse_cuda")}
MATRICES = {"row": 1, "axpy": 1, "ffn_relu": 2, "ffn_gated": 3}  # weight matrices per op
TORCH_DENSE, OURS_DENSE = "torch_dense", "ours_dense"


@dataclass(frozen=True)
class OperatorBenchConfig:
    device: str = "cpu"
    shapes: tuple[str, ...] = SHAPES
    dtypes: tuple[str, ...] = ("fp32", "fp16")
    batches: tuple[int, ...] = (1, 8)
    sparsities: tuple[float, ...] = SPARSITIES
    ops: tuple[str, ...] = OPS
    backends: tuple[str, ...] = ()  # empty: DEFAULT_BACKENDS[device]
    isas: tuple[str, ...] = ()  # sparse_cpu's ISA paths to time (empty: the one chosen at load)
    variants: tuple[str, ...] = ()  # sparse_cpu knob settings to time ("" or default: defaults)
    timing: TimingPolicy = field(default_factory=TimingPolicy)
    bandwidth_mb: int = 512
    seed: int = 0
    # every weight matrix, dense and sparse, on 2 MiB pages (ops.huge_pages)
    huge_pages: bool = True
    # results written into tensors allocated once per cell (out=), dense and sparse alike,
    # as a decode loop's workspace; False: every call allocates its result
    out_buffers: bool = True

    def __post_init__(self) -> None:
        bad = [s for s in self.sparsities if not 0.0 <= s < 1.0]
        if bad:
            hint = f" (did you mean {bad[0] / 100:g}?)" if 1.0 <= bad[0] < 100.0 else ""
            raise ValueError(f"sparsities are fractions in [0, 1); got {bad}{hint}")

    def backend_names(self) -> tuple[str, ...]:
        return self.backends or DEFAULT_BACKENDS[self.device]


QUICK = OperatorBenchConfig(
    shapes=("4096x16384",),
    dtypes=("fp32",),
    batches=(1,),
    sparsities=(0.0, 0.5, 0.9, 0.99),
    timing=TimingPolicy(warmup=1, reps=3, min_time_s=0.05),
    bandwidth_mb=256,
)


@dataclass
class LayerData:
    """One FFN layer's tensors; fc1 doubles as the gate, fc2 as the (transposed) down."""

    w_gate: torch.Tensor  # [d_ffn, d_model], positive mean so the gate fires
    w_up: torch.Tensor
    w_down_t: torch.Tensor  # [d_ffn, d_model], the sparse operators' layout
    w_down: torch.Tensor  # [d_model, d_ffn], HF/nn.Linear layout for the dense baseline
    b1: torch.Tensor  # fp32
    b2: torch.Tensor  # fp32

    @classmethod
    def make(cls, d_model: int, d_ffn: int, dtype: torch.dtype, device: str,
             gen: torch.Generator) -> LayerData:
        def mat(offset: float) -> torch.Tensor:
            w = torch.empty(d_ffn, d_model).normal_(0.0, 0.02, generator=gen)
            return (w + offset if offset else w).to(device=device, dtype=dtype)

        w_down_t = mat(0.0)
        return cls(
            w_gate=mat(0.005),
            w_up=mat(0.0),
            w_down_t=w_down_t,
            w_down=w_down_t.t().contiguous(),
            b1=torch.full((d_ffn,), 0.1, device=device),
            b2=torch.full((d_model,), 0.1, device=device),
        )

    def use_huge_pages(self, advise: bool) -> HugePages:
        """Every weight matrix, the dense baselines' included, onto huge pages (advise
        False: only how much of them is)."""
        return use_huge_pages_all([self.w_gate, self.w_up, self.w_down_t, self.w_down], advise)


def active_ids(d_ffn: int, sparsity: float, gen: torch.Generator, device: str) -> torch.Tensor:
    n = int(round(d_ffn * (1.0 - sparsity)))
    return torch.randperm(d_ffn, generator=gen)[:n].sort().values.to(device)


def touched_bytes(op: str, n_active: int, d_model: int, batch: int, w_es: int, x_es: int) -> int:
    """Weight rows read plus activations in and out (ids and biases are negligible)."""
    weights = MATRICES[op] * n_active * d_model * w_es
    if op == "row":
        acts = batch * d_model * x_es + batch * n_active * x_es
    elif op == "axpy":
        acts = batch * n_active * x_es + batch * d_model * x_es
    else:
        acts = 2 * batch * d_model * x_es
    return weights + acts


Linear = Callable[..., torch.Tensor]  # (x, w [N, K], bias | None, out | None) -> x w^T + bias


def torch_linear(a: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None,
                 out: torch.Tensor | None = None) -> torch.Tensor:
    """``torch.matmul`` (into ``out`` when given), then the bias in place."""
    y = torch.matmul(a, w.t(), out=out)
    return y if bias is None else y.add_(bias)


def buffers(like: torch.Tensor, on: bool) -> Callable[[int], torch.Tensor | None]:
    """``new(cols)``: a [batch, cols] tensor like ``like`` for one result, allocated now
    (None when ``on`` is False: the call allocates its own)."""
    return lambda cols: torch.empty(like.shape[0], cols, dtype=like.dtype,
                                    device=like.device) if on else None


def dense_fn(op: str, layer: LayerData, x: torch.Tensor, coeffs: torch.Tensor,
             linear: Linear = torch_linear, out_buffers: bool = False
             ) -> Callable[[], torch.Tensor]:
    """The op on the full matrices with a dense matrix product ``linear(x, w, bias, out)``
    (default ``torch.matmul``), its results (the hidden activations too) in buffers
    allocated once when ``out_buffers``. Every weight in HF (nn.Linear) layout: torch's CPU
    fp16 matmul against a [d_ffn, d_model] right operand is ~30x slower than against the
    transposed view, so the dense baselines get the layout they are fast with."""
    wg, wu, wd = layer.w_gate, layer.w_up, layer.w_down
    b1, b2 = layer.b1.to(x.dtype), layer.b2.to(x.dtype)
    new = buffers(x, out_buffers)
    d_ffn, d_model = wg.shape
    if op == "row":
        y = new(d_ffn)
        return lambda: linear(x, wg, None, y)
    y = new(d_model)
    if op == "axpy":
        return lambda: linear(coeffs, wd, None, y)
    g = new(d_ffn)
    if op == "ffn_relu":
        return lambda: linear(torch.relu_(linear(x, wg, b1, g)), wd, b2, y)
    u = new(d_ffn)
    return lambda: linear(torch.relu_(linear(x, wg, None, g)).mul_(linear(x, wu, None, u)), wd,
                          None, y)


def sparse_fn(op: str, ops: SparseOps, layer: LayerData, x: torch.Tensor,
              coeffs: torch.Tensor, idx: torch.Tensor, out_buffers: bool = False
              ) -> Callable[[], torch.Tensor]:
    """The sparse op through the public interface, into a result buffer allocated once when
    ``out_buffers`` and the backend writes one in place (``SparseOps.writes_out``)."""
    new = buffers(x, out_buffers and ops.writes_out)
    if op == "row":
        y = new(idx.numel())
        return lambda: ops.row(layer.w_gate, x, idx, check=False, out=y)
    y = new(layer.w_gate.shape[1])
    if op == "axpy":
        c = coeffs[:, : idx.numel()].contiguous()
        return lambda: ops.axpy(layer.w_down_t, c, idx, check=False, out=y)
    if op == "ffn_relu":
        return lambda: ops.ffn_relu(x, layer.w_gate, layer.b1, layer.w_down_t, layer.b2, idx,
                                    check=False, out=y)
    return lambda: ops.ffn_gated(x, layer.w_gate, layer.w_up, layer.w_down_t, idx, "reglu",
                                 check=False, out=y)


Builder = Callable[[str, LayerData, torch.Tensor, torch.Tensor, torch.Tensor],
                   Callable[[], torch.Tensor]]  # (op, layer, x, coeffs, idx) -> the timed call


@dataclass(frozen=True)
class Contender:
    """One sparse backend on one ISA path and knob setting ("" where the backend has none),
    or a baseline that is no SparseOps backend (`build` makes its calls, `runs` says which
    storage dtypes it takes)."""

    backend: str
    isa: str
    ops: SparseOps | None
    variant: str = ""  # as given ("" : the defaults)
    knobs: tuple[int, ...] = ()  # every knob's value in the extension's order ((): none)
    build: Builder | None = None
    runs: Callable[[torch.dtype], bool] = lambda dtype: True

    def fn(self, op: str, layer: LayerData, x: torch.Tensor, coeffs: torch.Tensor,
           idx: torch.Tensor, out_buffers: bool = False) -> Callable[[], torch.Tensor]:
        if self.build is not None:  # a baseline allocates its results
            return self.build(op, layer, x, coeffs, idx)
        assert self.ops is not None
        return sparse_fn(op, self.ops, layer, x, coeffs, idx, out_buffers)

    def wrap(self, fn: Callable[[], object], switch: bool) -> Callable[[], object]:
        """fn, switching the CPU kernels to this path and knobs first (untimed, before the
        flush: bench_timing.Call) when several paths or settings are timed."""
        if not switch:
            return fn
        cpu = torch.ops.powerbench_cpu
        select, set_knobs = cpu.set_cpu_isa.default, cpu.set_cpu_knobs.default
        isa, knobs = self.isa, list(self.knobs)
        if isa:
            self.ops.select_isa(isa)  # type: ignore[attr-defined]  # validates the name
        return Call(fn, lambda: (select(isa) if isa else None,
                                 set_knobs(knobs) if knobs else None))


def _torch_gather(cfg: OperatorBenchConfig) -> Contender:
    from powerbench.ops.torch_backend import TorchSparseOps

    return Contender("sparse_torch", "", TorchSparseOps(cfg.device))


def _torch_csr(name: str, index_dtype: torch.dtype) -> Callable[[OperatorBenchConfig], Contender]:
    def make(cfg: OperatorBenchConfig) -> Contender:
        from powerbench.ops import csr_baseline

        if cfg.device != "cpu":
            raise ValueError(f"{name}: torch's CSR baseline is timed on the CPU only")
        conventional = csr_baseline.ConventionalSparse(index_dtype, huge_pages=cfg.huge_pages)
        return Contender(name, "", None, build=conventional.fn, runs=csr_baseline.supports)
    return make


# the conventional sparse operator (ops.csr_baseline), opt-in: int64 indices (torch's
# default for a CSR matrix) and int32 (half the index bytes)
CSR, CSR_I32 = "torch_csr", "torch_csr_i32"
BASELINES: dict[str, Callable[[OperatorBenchConfig], Contender]] = {
    "sparse_torch": _torch_gather, CSR: _torch_csr(CSR, torch.int64),
    CSR_I32: _torch_csr(CSR_I32, torch.int32)}


def make_contenders(cfg: OperatorBenchConfig) -> list[Contender]:
    made: list[Contender] = []
    for name in cfg.backend_names():
        if name in BASELINES:
            made.append(BASELINES[name](cfg))
            continue
        if name not in BACKENDS:
            raise ValueError(f"unknown operator backend {name!r}; valid: "
                             f"{', '.join(sorted({*BACKENDS, *BASELINES}))}")
        ops = get_backend(name, fallback=False)
        loaded = getattr(ops, "isa", "")
        if not loaded:
            made.append(Contender(name, "", ops))
            continue
        specs = ops.knob_specs()  # type: ignore[attr-defined]
        for isa in cfg.isas or (loaded,):
            for variant in cfg.variants or ("",):
                values = parse_variant(variant, specs)
                made.append(Contender(name, isa, ops, variant.strip() if values else "",
                                      tuple(knob_vector(values, specs))))
    return made


def dense_kernels(cfg: OperatorBenchConfig) -> dict[str, Linear]:
    """torch.matmul, and on the CPU our dense kernel (the C++ extension's linear)."""
    kernels: dict[str, Linear] = {TORCH_DENSE: torch_linear}
    if cfg.device == "cpu":
        kernels[OURS_DENSE] = get_backend("sparse_cpu", fallback=False).prepare_linear()
    return kernels


def measure_bandwidth(cfg: OperatorBenchConfig) -> Bandwidth:
    if cfg.device == "cuda":
        return cuda_copy_bandwidth(max(cfg.bandwidth_mb, 1024))
    return cpu_read_bandwidth(cfg.bandwidth_mb)


def loaded_isa(contenders: list[Contender]) -> str:
    """The ISA path the compiled CPU kernels run by default (chosen at load), or ""."""
    return next((getattr(c.ops, "isa", "") for c in contenders if c.isa), "")


@dataclass
class _Case:
    """What is fixed while one op is measured at every sparsity."""

    op: str
    shape: str
    dtype: str
    batch: int
    d_model: int
    d_ffn: int
    es: int
    huge_page_fraction: float


def _measure_op(case: _Case, cfg: OperatorBenchConfig, timer: Timer, layer: LayerData,
                x: torch.Tensor, coeffs: torch.Tensor, contenders: list[Contender],
                dense: dict[str, Linear], bandwidth: Bandwidth, gen: torch.Generator,
                home: str, probe: SparseOps | None, log: Callable[[str], None]
                ) -> list[ResultRow]:
    skipped = [c.backend for c in contenders if not c.runs(DTYPES[case.dtype])]
    if skipped:
        log(f"# {case.op} {case.dtype}: {', '.join(skipped)} left out (no {case.dtype} kernel)")
        contenders = [c for c in contenders if c.runs(DTYPES[case.dtype])]
    compiled = [c for c in contenders if c.isa]
    switch = len({(c.isa, c.variant) for c in compiled}) > 1 or any(c.variant for c in compiled)
    dense_calls = {name: dense_fn(case.op, layer, x, coeffs, lin, cfg.out_buffers)
                   for name, lin in dense.items()}
    home_call = None
    if switch:  # the dense kernels on the path chosen at load, with the default knobs
        home_call = replace(compiled[0], isa=home, variant="",
                            knobs=tuple(knob_vector({}, compiled[0].ops.knob_specs())))
        dense_calls = {name: replace(home_call, isa=home if name == OURS_DENSE else "").wrap(
            call, True) for name, call in dense_calls.items()}
    dense_names = list(dense_calls)
    per_sparsity = []
    for sparsity in cfg.sparsities:
        idx = active_ids(case.d_ffn, sparsity, gen, cfg.device)
        calls = [c.wrap(c.fn(case.op, layer, x, coeffs, idx, cfg.out_buffers), switch)
                 for c in contenders]
        # the gather probe over the same rows, in the same rounds (home path, default knobs)
        probes = [replace(home_call, isa=home).wrap(p, True) if switch else p
                  for p in probe_calls(probe, case.op, layer, idx)]
        samples = timer.samples(*dense_calls.values(), *calls, *probes)
        nd, nc = len(dense_names), len(calls)
        per_sparsity.append((sparsity, idx.numel(), dict(zip(dense_names, samples, strict=False)),
                             samples[nd:nd + nc], samples[nd + nc:]))
    pooled = {name: [t for _, _, d, _, _ in per_sparsity for t in d[name]]
              for name in dense_names}
    medians = {name: statistics.median(v) for name, v in pooled.items()}
    best = min(medians, key=medians.__getitem__)
    full_bytes = touched_bytes(case.op, case.d_ffn, case.d_model, case.batch, case.es, case.es)
    dense_gbps = full_bytes / medians[best] / 1e9
    base = dict(device=cfg.device, op=case.op, shape=case.shape, dtype=case.dtype,
                batch=case.batch, dense_kernel=best, dense_gbps=dense_gbps,
                bandwidth_gbps=bandwidth.gbps, huge_page_fraction=case.huge_page_fraction)
    rows: list[ResultRow] = []
    for sparsity, n_active, dense_s, sparse_s, probe_s in per_sparsity:
        nbytes = touched_bytes(case.op, n_active, case.d_model, case.batch, case.es, case.es)
        t_dense = statistics.median(dense_s[best])
        # the dense kernel's GB/s in the same rounds as these calls (as the speedup), not
        # pooled over the run: the host's bandwidth drifts between sparsities
        same_rounds = {**base, "dense_gbps": full_bytes / t_dense / 1e9}
        ceil = ceiling(probe_s, MATRICES[case.op] * n_active * case.d_model * case.es)
        # the probe's own columns, the same for every contender at this sparsity
        probe = dict(ceiling_time_us=ceil.time_us, ceiling_gbps=ceil.gbps,
                     ceiling_probe=ceil.probe,
                     ceiling_speedup=round_quartiles(dense_s[best], ceil.seconds)[1]
                     ) if ceil else {}
        for c, s in zip(contenders, sparse_s, strict=True):
            t = statistics.median(s)
            p25, speedup, p75 = round_quartiles(dense_s[best], s)
            limit = dict(probe, ceiling_fraction=round_quartiles(ceil.seconds, s)[1]
                         ) if ceil else {}
            rows.append(ResultRow(backend=c.backend, isa=c.isa, variant=c.variant,
                                  sparsity=sparsity,
                                  time_us=t * 1e6, dense_time_us=t_dense * 1e6,
                                  speedup=speedup, achieved_gbps=nbytes / t / 1e9, **limit,
                                  speedup_p25=p25, speedup_p75=p75, **same_rounds))
            log(format_row(rows[-1]))
    for name in dense_names:
        t = medians[name]
        rows.append(ResultRow(backend=name, isa=home if name == OURS_DENSE else "",
                              sparsity=0.0, time_us=t * 1e6, dense_time_us=medians[best] * 1e6,
                              speedup=round_quartiles(pooled[best], pooled[name])[1],
                              achieved_gbps=full_bytes / t / 1e9, **base))
        log(format_row(rows[-1]))
    return rows


def run_benchmark(cfg: OperatorBenchConfig, log: Callable[[str], None] = print
                  ) -> tuple[list[ResultRow], Bandwidth]:
    contenders = make_contenders(cfg)
    dense = dense_kernels(cfg)
    probe = probe_ops(cfg.device)
    bandwidth = measure_bandwidth(cfg)
    home = loaded_isa(contenders)
    log(f"# device={cfg.device} threads={torch.get_num_threads()} "
        f"read probe={bandwidth.gbps:.1f} GB/s ({bandwidth.method}) isa={home or '-'}")
    timer = Timer(cfg.device, cfg.timing)
    gen = torch.Generator().manual_seed(cfg.seed)
    rows: list[ResultRow] = []
    try:
        with torch.inference_mode():
            for shape in cfg.shapes:
                d_model, d_ffn = parse_shape("task.shapes", shape)
                for dtype_name in cfg.dtypes:
                    dtype = DTYPES[dtype_name]
                    layer = LayerData.make(d_model, d_ffn, dtype, cfg.device, gen)
                    pages = layer.use_huge_pages(cfg.huge_pages)
                    log(f"# {shape} {dtype_name} weights: {100 * pages.fraction:.1f}% of "
                        f"{pages.nbytes >> 20} MiB on huge pages {pages.reason}".rstrip())
                    es = layer.w_gate.element_size()
                    for batch in cfg.batches:
                        x = torch.rand(batch, d_model, generator=gen).to(cfg.device, dtype)
                        coeffs = (torch.rand(batch, d_ffn, generator=gen) + 0.5).to(cfg.device,
                                                                                     dtype)
                        for op in cfg.ops:
                            case = _Case(op, shape, dtype_name, batch, d_model, d_ffn, es,
                                         pages.fraction)
                            rows += _measure_op(case, cfg, timer, layer, x, coeffs, contenders,
                                                dense, bandwidth, gen, home, probe, log)
                    del layer
    finally:
        if home:  # back on the path chosen at load, with the default knobs
            cpu = next(c for c in contenders if c.isa).ops
            cpu.select_isa(home)  # type: ignore[attr-defined]
            cpu.set_knobs({})  # type: ignore[attr-defined]
    return rows, bandwidth
