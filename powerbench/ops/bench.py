"""Operator benchmark: sparse backends against torch dense, measured side by side.

For every shape (``d_model x d_ffn``), storage dtype, batch, op and sparsity it times each
sparse backend and ``torch.matmul`` on the full matrices in the same run, calls interleaved
(dense, sparse, dense, sparse, ...; medians after warm-up, cache flushed before each call,
see :mod:`powerbench.ops.bench_timing`); each row's ``dense_time_us`` is the median of the
dense calls interleaved with that row's sparse calls, the ``torch_dense`` row the median of
all of them. The machine's memory bandwidth is measured first; achieved GB/s is reported on
the bytes actually touched (active weight rows plus activations).

Data are built so that every neuron in the active set is truly active (x >= 0 and a gate
with positive mean, fc1 bias > 0): a perfect predictor. The compiled kernels skip neurons
whose activation is exactly zero, so with random data they would read fewer rows than the
byte count assumes; here they read exactly the rows counted. Active ids are sorted, as a
predictor's ``nonzero`` returns them. Timed calls use ``check=False`` (the decode path).

Run: ``powerbench bench-operators [task.quick=true]`` (powerbench.tasks.bench_operators), or
``python experiments/bench_operators.py [--quick]`` where only torch is installed (a lent GPU).
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from powerbench.ops.bandwidth import Bandwidth, cpu_read_bandwidth, cuda_copy_bandwidth
from powerbench.ops.bench_report import (
    ResultRow,
    format_row,
    plot_speedup,
    write_csv,
)
from powerbench.ops.bench_timing import Timer, TimingPolicy
from powerbench.ops.interface import SparseOps
from powerbench.ops.registry import get_backend

SHAPES = ("4096x11008", "4096x16384", "8192x28672")
SPARSITIES = (0.0, 0.1, 0.5, 0.8, 0.9, 0.95, 0.99)
OPS = ("row", "axpy", "ffn_relu", "ffn_gated")
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
DEFAULT_BACKENDS = {"cpu": ("sparse_torch", "sparse_cpu"), "cuda": ("sparse_torch", "sparse_cuda")}
MATRICES = {"row": 1, "axpy": 1, "ffn_relu": 2, "ffn_gated": 3}  # weight matrices per op


@dataclass(frozen=True)
class OperatorBenchConfig:
    device: str = "cpu"
    shapes: tuple[str, ...] = SHAPES
    dtypes: tuple[str, ...] = ("fp32", "fp16")
    batches: tuple[int, ...] = (1, 8)
    sparsities: tuple[float, ...] = SPARSITIES
    ops: tuple[str, ...] = OPS
    backends: tuple[str, ...] = ()  # empty: DEFAULT_BACKENDS[device]
    timing: TimingPolicy = field(default_factory=TimingPolicy)
    bandwidth_mb: int = 512
    seed: int = 0

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


def parse_shape(shape: str) -> tuple[int, int]:
    """``"4096x16384"`` -> (d_model, d_ffn)."""
    d_model, d_ffn = (int(v) for v in shape.lower().split("x"))
    return d_model, d_ffn


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


def dense_fn(op: str, layer: LayerData, x: torch.Tensor, coeffs: torch.Tensor
             ) -> Callable[[], torch.Tensor]:
    """torch.matmul on the full matrices, every weight in HF (nn.Linear) layout: torch's CPU
    fp16 matmul against a [d_ffn, d_model] right operand is ~30x slower than against the
    transposed view, so the dense baseline gets the layout torch is fast with."""
    wg, wu, wd = layer.w_gate, layer.w_up, layer.w_down
    b1, b2 = layer.b1.to(x.dtype), layer.b2.to(x.dtype)
    if op == "row":
        return lambda: torch.matmul(x, wg.t())
    if op == "axpy":
        return lambda: torch.matmul(coeffs, wd.t())
    if op == "ffn_relu":
        return lambda: torch.matmul(torch.relu(torch.matmul(x, wg.t()) + b1), wd.t()) + b2
    return lambda: torch.matmul(torch.relu(torch.matmul(x, wg.t())) * torch.matmul(x, wu.t()),
                                wd.t())


def sparse_fn(op: str, ops: SparseOps, layer: LayerData, x: torch.Tensor,
              coeffs: torch.Tensor, idx: torch.Tensor) -> Callable[[], torch.Tensor]:
    if op == "row":
        return lambda: ops.row(layer.w_gate, x, idx, check=False)
    if op == "axpy":
        c = coeffs[:, : idx.numel()].contiguous()
        return lambda: ops.axpy(layer.w_down_t, c, idx, check=False)
    if op == "ffn_relu":
        return lambda: ops.ffn_relu(x, layer.w_gate, layer.b1, layer.w_down_t, layer.b2, idx,
                                    check=False)
    return lambda: ops.ffn_gated(x, layer.w_gate, layer.w_up, layer.w_down_t, idx, "reglu",
                                 check=False)


def make_backends(cfg: OperatorBenchConfig) -> dict[str, SparseOps]:
    made: dict[str, SparseOps] = {}
    for name in cfg.backend_names():
        if name == "sparse_torch":
            from powerbench.ops.torch_backend import TorchSparseOps

            made[name] = TorchSparseOps(cfg.device)
        else:
            made[name] = get_backend(name, fallback=False)
    return made


def measure_bandwidth(cfg: OperatorBenchConfig) -> Bandwidth:
    if cfg.device == "cuda":
        return cuda_copy_bandwidth(max(cfg.bandwidth_mb, 1024))
    return cpu_read_bandwidth(cfg.bandwidth_mb)


def run_benchmark(cfg: OperatorBenchConfig, log: Callable[[str], None] = print
                  ) -> tuple[list[ResultRow], Bandwidth]:
    backends = make_backends(cfg)
    bandwidth = measure_bandwidth(cfg)
    log(f"# device={cfg.device} threads={torch.get_num_threads()} "
        f"bandwidth={bandwidth.gbps:.1f} GB/s ({bandwidth.method}) load={load_average()}")
    timer = Timer(cfg.device, cfg.timing)
    gen = torch.Generator().manual_seed(cfg.seed)
    rows: list[ResultRow] = []
    with torch.inference_mode():
        for shape in cfg.shapes:
            d_model, d_ffn = parse_shape(shape)
            for dtype_name in cfg.dtypes:
                dtype = DTYPES[dtype_name]
                layer = LayerData.make(d_model, d_ffn, dtype, cfg.device, gen)
                es = layer.w_gate.element_size()
                for batch in cfg.batches:
                    x = torch.rand(batch, d_model, generator=gen).to(cfg.device, dtype)
                    coeffs = (torch.rand(batch, d_ffn, generator=gen) + 0.5).to(cfg.device, dtype)
                    for op in cfg.ops:
                        base = dict(device=cfg.device, op=op, shape=shape, dtype=dtype_name,
                                    batch=batch, bandwidth_gbps=bandwidth.gbps)
                        dense = dense_fn(op, layer, x, coeffs)
                        dense_samples: list[float] = []
                        for sparsity in cfg.sparsities:
                            idx = active_ids(d_ffn, sparsity, gen, cfg.device)
                            nbytes = touched_bytes(op, idx.numel(), d_model, batch, es, es)
                            for name, ops in backends.items():
                                sparse = sparse_fn(op, ops, layer, x, coeffs, idx)
                                td_s, t_s = timer.samples(dense, sparse)
                                dense_samples += td_s
                                t, t_dense = statistics.median(t_s), statistics.median(td_s)
                                rows.append(ResultRow(backend=name, sparsity=sparsity,
                                                      time_us=t * 1e6,
                                                      dense_time_us=t_dense * 1e6,
                                                      speedup=t_dense / t,
                                                      achieved_gbps=nbytes / t / 1e9, **base))
                                log(format_row(rows[-1]))
                        t_dense = statistics.median(dense_samples or [timer.median(dense)])
                        nbytes = touched_bytes(op, d_ffn, d_model, batch, es, es)
                        rows.append(ResultRow(backend="torch_dense", sparsity=0.0,
                                              time_us=t_dense * 1e6,
                                              dense_time_us=t_dense * 1e6, speedup=1.0,
                                              achieved_gbps=nbytes / t_dense / 1e9, **base))
                        log(format_row(rows[-1]))
                del layer
    return rows, bandwidth


def load_average() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "n/a"


def write_outputs(rows: Sequence[ResultRow], out_dir: Path, device: str, tag: str,
                  plot: bool = True) -> list[Path]:
    """results/operators_<device><tag>.csv (and .png)."""
    outputs = [write_csv(rows, out_dir / f"operators_{device}{tag}.csv")]
    if plot:
        outputs.append(plot_speedup(rows, out_dir / f"operators_{device}{tag}.png"))
    return outputs


def run_params(cfg: OperatorBenchConfig, bandwidth: Bandwidth, quick: bool, elapsed: float,
               load_before: str) -> dict[str, object]:
    """What a run logs beside its rows (MLflow params)."""
    return {"device": cfg.device, "quick": quick, "threads": torch.get_num_threads(),
            "bandwidth_gbps": round(bandwidth.gbps, 2), "bandwidth_method": bandwidth.method,
            "load_before": load_before, "load_after": load_average(),
            "torch": torch.__version__, "elapsed_s": round(elapsed, 1),
            "shapes": ",".join(cfg.shapes), "dtypes": ",".join(cfg.dtypes),
            "batches": ",".join(map(str, cfg.batches)),
            "sparsities": ",".join(map(str, cfg.sparsities))}
