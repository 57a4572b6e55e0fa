"""The machine's ceiling for each gather in the operator benchmark: the read-only gather
probe (``CpuSparseOps.gather_probe``, ``csrc/gather_probe_impl.h``) over exactly the weight
rows an operator reads, timed in the same rounds as the operator and the dense kernels.

Three probes read the same bytes: ``slots`` (the operators' own 4-slot schedule), ``wide``
(the same with 8 row slots per thread on AVX-512) and ``runs`` (adjacent rows merged into
runs, one stream per thread); the ceiling is the fastest. Against it a row reports the
ceiling's GB/s on the weight bytes, the share of the ceiling the operator reaches (ceiling
time / operator time) and the speedup over dense the ceiling itself gives (dense time /
ceiling time): the most any operator could show here. Both ratios are medians over the
rounds of the two calls' ratio, as the speedup is (``ops.bench_timing.round_quartiles``).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

PROBES = ("slots", "runs", "wide")  # CpuSparseOps.gather_probe modes, in the order they are timed


@dataclass(frozen=True)
class Ceiling:
    time_us: float  # the faster probe's median
    probe: str  # which (one of PROBES)
    gbps: float  # weight bytes read / time
    seconds: tuple[float, ...]  # its per-call times, one per round (paired ratios)


def weight_matrices(op: str, layer) -> list[torch.Tensor]:
    """The matrices whose rows `op` reads, in the sparse operators' layout."""
    return {"row": [layer.w_gate], "axpy": [layer.w_down_t],
            "ffn_relu": [layer.w_gate, layer.w_down_t],
            "ffn_gated": [layer.w_gate, layer.w_up, layer.w_down_t]}[op]


def probe_calls(ops, op: str, layer, idx: torch.Tensor) -> list[Callable[[], object]]:
    """One timed call per probe (empty when `ops` has no gather probe, e.g. sparse_cpu is
    not built)."""
    if ops is None:
        return []
    mats = weight_matrices(op, layer)
    return [lambda mode=mode: ops.gather_probe(mats, idx, mode, check=False) for mode in PROBES]


def ceiling(samples: Sequence[Sequence[float]], weight_bytes: int) -> Ceiling | None:
    """The faster probe from each probe's per-call seconds (None without probes)."""
    if not samples:
        return None
    medians = [statistics.median(s) for s in samples]
    best = min(range(len(medians)), key=medians.__getitem__)
    return Ceiling(medians[best] * 1e6, PROBES[best], weight_bytes / medians[best] / 1e9,
                   tuple(samples[best]))


def probe_ops(device: str):
    """sparse_cpu when it is available on this device, else None (no ceiling columns)."""
    if device != "cpu":
        return None
    try:
        from powerbench.ops.registry import get_backend

        ops = get_backend("sparse_cpu", fallback=False)
    except Exception:  # extension unavailable: no probe
        return None
    return ops if hasattr(ops, "gather_probe") else None
