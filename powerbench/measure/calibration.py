"""Calibration microbenchmarks: the `local` profile's CPU rates re-measured at a model's
shapes (see powerbench.measure.twin for how validation uses them)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

import torch
import torch.nn.functional as F

from powerbench.hardware.hardware_profile import HardwareProfile, KernelRates
from powerbench.measure.op_counts import OpCounter
from powerbench.threads import torch_threads

Timer = Callable[[Callable[[], object], int], float]
# the KernelRates figures measured by these microbenchmarks (each kept per sample)
SAMPLED_RATES = ("stream_bw", "gemm_flops", "attention_flops", "op_s", "sparse_call_s")


def best_time(fn: Callable[[], object], repeats: int) -> float:
    """Shortest wall time of `repeats` calls after one warm-up: what the machine achieves
    undisturbed (the cached `local` profile's statistic: it is measured once and must not
    carry the load of that moment)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _median_time(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of `repeats` calls after one warm-up: the same statistic as the
    engines' metrics (median of repeats), so that on a shared machine the calibration and
    the engine see the same kind of load (a best-of would catch only the quiet moments)."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(statistics.median(times))


def layer_matrix_shapes(d_model: int, d_ffn: int) -> list[tuple[int, int]]:
    """The [out, in] weight matrices one decode step of a decoder layer streams through
    the dense projection, in the decoder's order: Q/K/V stacked [3 d, d] (one product),
    O [d, d], the FFN's up [d_ffn, d] and down [d, d_ffn] (stored [out, in]: long rows,
    which a GEMV may stream at another rate than tall ones: torch's fp32 GEMV ~25% faster
    on this machine's CPU)."""
    return [(3 * d_model, d_model), (d_model, d_model), (d_ffn, d_model), (d_model, d_ffn)]


def working_set_matrices(nbytes: float, shapes: Sequence[tuple[int, int]],
                         elem_bytes: int) -> list[tuple[int, int]]:
    """`shapes` repeated in order until they hold at least `nbytes` (each shape once at
    least): the matrices a working-set test streams, as layer after layer of a model."""
    out: list[tuple[int, int]] = []
    total = 0
    while total < nbytes or len(out) < len(shapes):
        rows, cols = shapes[len(out) % len(shapes)]
        out.append((rows, cols))
        total += rows * cols * elem_bytes
    return out


def working_set_bandwidth(nbytes: float, dim: int = 256, dtype: torch.dtype = torch.float32,
                          threads: int | None = None, repeats: int = 31,
                          timer: Timer = _median_time,
                          shapes: Sequence[tuple[int, int]] | None = None) -> float:
    """Bytes/s of matrix-vector products streaming `nbytes` of weight matrices (one product
    each, like a model's), computed by the decoder's own dense projection
    (`powerbench.engine.linear.make_linear`: our dense kernel on the CPU). `shapes`: the [out, in] matrices in the engine's order, repeated
    until the working set is full (`layer_matrix_shapes`: a decoder layer's, so each call
    streams what the engine's does, in its mix of tall and long-row matrices); else 1 MB
    [rows, dim] pieces. The twin charges each call's fixed
    cost separately (per operator), so this is meant to be the streaming rate: 1 MB pieces
    of a 4096-wide fp16 model spend a large share of each call on dispatch."""
    from powerbench.engine.linear import make_linear

    linear = make_linear()
    elem = torch.tensor([], dtype=dtype).element_size()
    if shapes is None:
        shapes = [(max(int(2**20 // (dim * elem)), 1), dim)]
    layout = working_set_matrices(nbytes, shapes, elem)
    mats = [torch.randn(r, c, dtype=dtype) for r, c in layout]
    xs = {c: torch.randn(1, c, dtype=dtype) for _, c in layout}
    pairs = [(xs[m.shape[1]], m) for m in mats]
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        with torch.inference_mode():
            t = timer(lambda: [linear(x, m, None) for x, m in pairs], repeats)
    finally:
        torch.set_num_threads(before)
    return sum(r * c for r, c in layout) * elem / t


def shaped_gemm_flops(rows: int, d_model: int, d_ffn: int,
                      dtype: torch.dtype = torch.float32, repeats: int = 31,
                      timer: Timer = _median_time) -> float:
    """FLOP/s of one decoder layer's matrix products for a prompt of `rows` tokens: four
    [rows, d_model] x [d_model, d_model] (Q, K, V, O) and the FFN pair through d_ffn
    (the profile's test, one 512^3 GEMM, is far more efficient than these shapes)."""
    x = torch.randn(rows, d_model, dtype=dtype)
    attn = [torch.randn(d_model, d_model, dtype=dtype) for _ in range(4)]
    w1 = torch.randn(d_ffn, d_model, dtype=dtype)
    w2 = torch.randn(d_model, d_ffn, dtype=dtype)

    def layer() -> None:
        for w in attn:
            F.linear(x, w)
        F.linear(F.linear(x, w1), w2)

    with torch.inference_mode():
        t = timer(layer, repeats)
    return 2.0 * rows * (4 * d_model * d_model + 2 * d_model * d_ffn) / t


def attention_flops(rows: int, n_heads: int, head_dim: int,
                    dtype: torch.dtype = torch.float32, repeats: int = 31,
                    timer: Timer = _median_time) -> float:
    """FLOP/s of causal scaled-dot-product attention over a prompt of `rows` tokens at the
    model's heads, counted as the cost model counts scores: 4 x heads x head_dim x
    (query, key) pairs (the profile's GEMM test says nothing about this kernel)."""
    q, k, v = (torch.randn(1, n_heads, rows, head_dim, dtype=dtype) for _ in range(3))
    with torch.inference_mode():
        t = timer(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), repeats)
    return 4.0 * n_heads * head_dim * rows * (rows + 1) / 2 / t


def python_op_seconds(iters: int = 300, timer: Timer = _median_time) -> float:
    """Seconds per operator of a toy pre-norm attention block (d_model 64, 4 heads, 8 cached
    tokens) issued from Python as the decoder issues it at decode: layer norm, one stacked
    Q/K/V product, then the fused decode-attention operator where the decoder has it
    (`powerbench.engine.decode_kernels`; else the torch chain: view, slices and transposes,
    KV-cache writes, scaled-dot-product attention), the O product, the residual add. Its
    operators are counted like the engine's (dispatches), so the cost per operator
    carries the same mix of cheap and dearer kernels; the shapes are small enough that
    no read or FLOP shows. (A tight loop of one small `F.linear` gives ~25% less here.)"""
    from powerbench.engine.decode_kernels import decode_kernels

    d, heads = 64, 4
    hd = d // heads
    x, w, b = torch.randn(1, 1, d), torch.randn(d, d), torch.randn(d)
    w_qkv, b_qkv = torch.randn(3 * d, d), torch.randn(3 * d)
    ln_w, ln_b = torch.ones(d), torch.zeros(d)
    keys, values = torch.randn(1, heads, 9, hd), torch.randn(1, heads, 9, hd)
    kernels = decode_kernels("cpu")

    def attention(y: torch.Tensor) -> torch.Tensor:
        if kernels is not None:
            return kernels.attention_op(y, None, None, keys, values, 8, heads, hd ** -0.5)
        y = y.view(1, 1, 3 * heads, hd)
        qk = y[:, :, :2 * heads].transpose(1, 2)
        q, k = qk[:, :heads], qk[:, heads:]
        v = y[:, :, 2 * heads:].transpose(1, 2)
        keys[:, :, 8:9] = k
        values[:, :, 8:9] = v
        o = F.scaled_dot_product_attention(q, keys, values)
        return o.transpose(1, 2).reshape(1, 1, d)

    def block() -> torch.Tensor:
        a = F.layer_norm(x, (d,), ln_w, ln_b)
        return x + F.linear(attention(F.linear(a, w_qkv, b_qkv)), w, b)

    counter = OpCounter()
    with torch.inference_mode():
        with counter:
            block()
        ops = sum(counter.counts.values())

        def run() -> None:
            for _ in range(iters):
                block()

        return timer(run, 7) / (iters * ops)


def sparse_call_seconds(d_model: int, d_ffn: int, backend: str = "sparse_cpu",
                        iters: int = 2000, timer: Timer = _median_time) -> float:
    """Seconds per call of the engine's fused predictor + sparse FFN operator at the model's
    shapes on an EMPTY active set with a rank-1 predictor: the operator's fixed cost (its
    dispatch, kernel set-up, output allocation), not its reads."""
    from powerbench.ops import PredictorWeights, ReluFFNWeights, get_backend

    ops = get_backend(backend)
    w = ReluFFNWeights(torch.randn(d_ffn, d_model), torch.zeros(d_ffn),
                       torch.randn(d_ffn, d_model), torch.zeros(d_model))
    p = PredictorWeights(torch.randn(1, d_model), torch.zeros(1), torch.randn(1, d_ffn),
                         torch.zeros(d_ffn), threshold=float("inf"))
    call, x = ops.prepare_ffn_predicted(w, p), torch.randn(1, d_model)

    def run() -> None:
        for _ in range(iters):
            call(x)

    with torch.inference_mode():
        return timer(run, 7) / iters


def calibrate_local(hardware: HardwareProfile, working_set_bytes: float, dim: int,
                    dtype: torch.dtype = torch.float32, gemm_rows: int | None = None,
                    d_ffn: int | None = None, threads: int = 0,
                    attention_shape: tuple[int, int, int] | None = None,
                    ) -> tuple[HardwareProfile, dict]:
    """The local profile with its CPU bandwidth (streamed through a decoder layer's
    matrices, `layer_matrix_shapes`, when d_ffn is given), operator cost, (with gemm_rows
    and d_ffn) GEMM FLOP/s and sparse-call cost, and (with attention_shape = (prompt
    tokens, heads, head_dim)) attention-score FLOP/s re-measured for this model's shapes, with the
    engine's thread count (0: torch's default) (microbenchmarks only; see the module
    docstring). They replace the profile's engine-kernel rates: one KernelRates entry for
    this dtype and thread count, which the cost model then reads."""
    with torch_threads(threads) as used:
        shapes = layer_matrix_shapes(dim, d_ffn) if d_ffn else None
        bw = working_set_bandwidth(working_set_bytes, dim, dtype, shapes=shapes)
        op_s = python_op_seconds()
        flops = hardware.cpu.effective_flops
        sparse_extra_s = 0.0
        attention = hardware.cpu.effective_attention_flops
        if attention_shape:  # (prompt tokens, heads, head_dim)
            attention = attention_flops(*attention_shape, dtype=dtype)
        if gemm_rows and d_ffn:
            flops = shaped_gemm_flops(gemm_rows, dim, d_ffn, dtype)
            sparse_extra_s = max(sparse_call_seconds(dim, d_ffn) - op_s, 0.0)
    name = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]
    kernel = KernelRates(dtype=name, threads=used, stream_bw=bw,
                         gemm_flops=flops or 0.0, attention_flops=attention or flops or 0.0,
                         op_s=op_s, sparse_call_s=sparse_extra_s,
                         shape={"width": dim, "ffn": d_ffn or 0, "prompt_rows": gemm_rows or 0})
    cpu = replace(hardware.cpu, effective_bw=bw, effective_flops=flops,
                  effective_attention_flops=attention, kernels=(kernel,))
    units = dict(hardware.units)
    units[hardware.host] = cpu
    profile_kernel = hardware.cpu.kernel(name, used)
    meta = {"calibrated_bw_gb_s": bw / 1e9, "calibrated_op_us": op_s * 1e6,
            "calibrated_sparse_call_us": sparse_extra_s * 1e6,
            "calibrated_gflops": (flops or 0.0) / 1e9,
            "calibrated_attention_gflops": (attention or 0.0) / 1e9,
            "profile_bw_gb_s": (profile_kernel.stream_bw if profile_kernel
                                else hardware.cpu_bw) / 1e9,
            "profile_op_us": (profile_kernel.op_s if profile_kernel else hardware.launch_s) * 1e6,
            "profile_gflops": (profile_kernel.gemm_flops if profile_kernel
                               else hardware.cpu.effective_flops or 0.0) / 1e9}
    return replace(hardware, units=units, launch_s=op_s,
                   meta={**hardware.meta, "calibration": meta}), meta


def _combine(profiles: Sequence[HardwareProfile], rate: Callable[[list[float]], float],
             cost: Callable[[list[float]], float]) -> HardwareProfile:
    """The first profile with CPU rates combined by `rate` and per-call costs by `cost`."""
    a = profiles[0]

    def rates(get: Callable[[HardwareProfile], float | None]) -> float | None:
        values = [get(p) for p in profiles]
        return None if not all(values) else rate(values)  # type: ignore[arg-type]

    kernels = a.cpu.kernels
    if all(len(p.cpu.kernels) == 1 for p in profiles):  # calibrations: one entry each
        ks = [p.cpu.kernels[0] for p in profiles]
        samples = {f: [float(getattr(k, f)) for k in ks] for f in SAMPLED_RATES}
        kernels = (replace(ks[0], **{f: rate(samples[f]) for f in
                                     ("stream_bw", "gemm_flops", "attention_flops")},
                           op_s=cost(samples["op_s"]),
                           sparse_call_s=cost(samples["sparse_call_s"]),
                           samples=samples),)  # each calibration's, in time order
    cpu = replace(a.cpu, effective_bw=rates(lambda p: p.cpu.effective_bw),
                  effective_flops=rates(lambda p: p.cpu.effective_flops),
                  effective_attention_flops=rates(lambda p: p.cpu.effective_attention_flops),
                  kernels=kernels)
    meta = dict(a.meta)
    calls = [p.meta.get("calibration", {}).get("calibrated_sparse_call_us") for p in profiles]
    if all(c is not None for c in calls):
        meta["calibration"] = {**a.meta.get("calibration", {}),
                               "calibrated_sparse_call_us": cost(calls)}  # type: ignore[arg-type]
    return replace(a, units={**a.units, a.host: cpu},
                   launch_s=cost([p.launch_s for p in profiles]), meta=meta)


def time_average(*profiles: HardwareProfile) -> HardwareProfile:
    """Calibrations taken at several times, averaged in time: harmonic mean of the rates
    (a byte's mean cost), arithmetic mean of the per-call costs."""
    return _combine(profiles, lambda v: len(v) / sum(1.0 / x for x in v), statistics.fmean)
