"""Device and link rates the cost model reads off a HardwareProfile.

Every time is a roofline of one operation group on one device:

    compute + memory:  max(bytes / bandwidth, flops / flop_rate)
    accelerator:       max(roofline, kernels x launch_s)   launches are asynchronous: a
                       queue of tiny kernels is launch-bound, a big one bandwidth-bound
    CPU:               roofline + operators x op_s         the host issues and executes:
                       each operator ends in a worker barrier / dispatch, not overlapped

Effective (derated or measured) values only; datasheet peaks are never used when an
effective value exists (the papers' hardware descriptions).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from powerbench.hardware.hardware_profile import ComputeUnit, HardwareProfile
from powerbench.simulator.config import SimulatorConfig

DEFAULT_CPU_OP_S = 1e-6  # one OpenMP-style barrier across a desktop CPU's threads (estimate)

GPU, CPU = "gpu", "cpu"


@dataclass(frozen=True)
class DeviceRates:
    """What one compute unit sustains."""

    role: str  # "gpu" (the profile's accelerator) or "cpu" (its host)
    bandwidth: float  # bytes/s from its own memory tier
    flops: float  # FLOP/s sustained
    op_s: float  # seconds per kernel launch (gpu) / per operator (cpu)
    overlapped_ops: bool  # True: launches overlap execution (max); False: they add
    attention_flops: float | None = None  # attention-score FLOP/s (None: `flops`)
    sparse_call_s: float = 0.0  # fixed cost of one sparse FFN call beyond one operator

    def score_flops_equivalent(self, score_flops: np.ndarray | float) -> np.ndarray:
        """Attention-score FLOPs expressed at this device's GEMM rate (so one roofline
        covers projections and scores: t = score_flops / attention_flops)."""
        scale = self.flops / self.attention_flops if self.attention_flops else 1.0
        return np.asarray(score_flops, dtype=np.float64) * scale

    def time(self, nbytes: np.ndarray | float, flops: np.ndarray | float,
             ops: np.ndarray | float) -> np.ndarray:
        """Seconds for `ops` operators that read `nbytes` and do `flops` (vectorised)."""
        nbytes, flops, ops = (np.asarray(v, dtype=np.float64) for v in (nbytes, flops, ops))
        roof = np.maximum(nbytes / self.bandwidth, flops / self.flops)
        overhead = ops * self.op_s
        return np.maximum(roof, overhead) if self.overlapped_ops else roof + overhead


@dataclass(frozen=True)
class LinkRates:
    """Host <-> accelerator: one synchronisation plus bytes over the link.

    Unified memory (phones): no copy (infinite bandwidth), the synchronisation remains.
    """

    to_gpu_bw: float  # host -> device bytes/s
    to_cpu_bw: float  # device -> host bytes/s
    sync_s: float

    def transfer(self, nbytes: np.ndarray | float, dst: str) -> np.ndarray:
        bw = self.to_gpu_bw if dst == GPU else self.to_cpu_bw
        return np.asarray(nbytes, dtype=np.float64) / bw


def _unit_flops(unit: ComputeUnit, fraction: float = 1.0) -> float:
    """Effective FLOP/s, else the best peak (an NPU publishes only int8 TOPS)."""
    for value in (unit.effective_flops, unit.peak_fp16_flops, unit.peak_fp32_flops,
                  unit.peak_int8_ops):
        if value:
            return float(value) * fraction
    cluster_peak = sum(c.peak_fp32_flops or 0.0 for c in unit.clusters)
    if cluster_peak > 0:
        return cluster_peak * fraction
    raise ValueError(f"compute unit {unit.name!r} has no FLOP/s figure (effective or peak)")


def host_threads(unit: ComputeUnit) -> int:
    """The unit's hardware threads (its cores where no thread count is given; at least 1)."""
    return max(unit.threads or unit.cores, 1)


def cpu_op_seconds(hw: HardwareProfile, cfg: SimulatorConfig) -> float:
    if cfg.cpu_op_us is not None:
        return cfg.cpu_op_us * 1e-6
    if hw.accelerator is None:  # CPU-only profile: launch_s is the CPU operator dispatch
        return hw.launch_s
    return hw.thread_sync_s if hw.thread_sync_s is not None else DEFAULT_CPU_OP_S


def cpu_rates(hw: HardwareProfile, cfg: SimulatorConfig,
              dtype: str | None = None) -> DeviceRates:
    """The host. Where the profile measured the engines' own kernels for this weight
    `dtype` (`local`: ComputeUnit.kernels), their rates at `cfg.cpu_threads` (None: the
    most threads measured). Else `cfg.cpu_threads` below the core count scales FLOP/s by
    threads / cores and, where GEMV rates were measured per thread count, the bandwidth by
    the measured GEMV ratio (else the tier bandwidth stays: a few cores saturate DRAM)."""
    unit = hw.cpu
    kernel = unit.kernel(dtype, cfg.cpu_threads) if dtype else None
    if kernel is not None:
        op_s = cfg.cpu_op_us * 1e-6 if cfg.cpu_op_us is not None else kernel.op_s
        return DeviceRates(CPU, kernel.stream_bw, kernel.gemm_flops, op_s, False,
                           kernel.attention_flops, kernel.sparse_call_s)
    bw = hw.bandwidth(unit)
    cores = host_threads(unit)
    threads = cfg.cpu_threads
    fraction = 1.0
    if threads is not None and unit.cores:
        fraction = min(max(threads, 1) / cores, 1.0)
        if unit.gemv_flops:
            best = max(unit.gemv_flops.values())
            usable = [t for t in unit.gemv_flops if t <= threads] or [min(unit.gemv_flops)]
            bw *= unit.gemv_flops[max(usable)] / best
    attention = unit.effective_attention_flops
    return DeviceRates(CPU, bw, _unit_flops(unit, fraction), cpu_op_seconds(hw, cfg), False,
                       attention * fraction if attention else None)


def gpu_rates(hw: HardwareProfile) -> DeviceRates | None:
    unit = hw.gpu
    if unit is None:
        return None
    return DeviceRates(GPU, hw.bandwidth(unit), _unit_flops(unit), hw.launch_s, True,
                       unit.effective_attention_flops)


def link_rates(hw: HardwareProfile) -> LinkRates | None:
    if hw.gpu is None:
        return None
    if hw.link is None:  # unified memory
        return LinkRates(math.inf, math.inf, hw.sync_s)
    return LinkRates(hw.link.h2d_effective_bw, hw.link.d2h_effective_bw, hw.sync_s)
