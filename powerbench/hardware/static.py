"""Static hardware profiles: datasheet and published numbers from conf/hardware/*.yaml."""

from __future__ import annotations

import os

from powerbench.hardware.config import (
    ComputeUnitConfig,
    MemoryTierConfig,
    StaticHardwareConfig,
)
from powerbench.hardware.hardware_profile import (
    GB,
    ComputeUnit,
    CoreCluster,
    HardwareProfile,
    Link,
    MemoryTier,
)

TERA = 1e12


def _gb(value: float | None) -> float | None:
    return None if value is None else float(value) * GB


def _tera(value: float | None) -> float | None:
    return None if value is None else float(value) * TERA


def _tier(name: str, c: MemoryTierConfig) -> MemoryTier:
    if c.reserved_gb > c.capacity_gb:
        raise ValueError(f"memory {name!r}: reserved_gb {c.reserved_gb} > capacity_gb "
                         f"{c.capacity_gb}")
    for label, value in (("capacity_gb", c.capacity_gb),
                         ("effective_bw_gb_s", c.effective_bw_gb_s)):
        if not value > 0:
            raise ValueError(f"memory {name!r}: {label} must be positive, got {value}")
    if c.peak_bw_gb_s is not None and c.effective_bw_gb_s > c.peak_bw_gb_s:
        raise ValueError(f"memory {name!r}: effective bandwidth {c.effective_bw_gb_s} GB/s "
                         f"exceeds the peak {c.peak_bw_gb_s} GB/s")
    return MemoryTier(
        name=name, kind=c.kind, capacity_bytes=c.capacity_gb * GB,
        reserved_bytes=c.reserved_gb * GB, peak_bw=_gb(c.peak_bw_gb_s),
        effective_bw=c.effective_bw_gb_s * GB, extra=dict(c.extra),
    )


def _unit(name: str, c: ComputeUnitConfig) -> ComputeUnit:
    clusters = tuple(
        CoreCluster(name=k.name, cores=k.cores, threads_per_core=k.threads_per_core,
                    max_hz=None if k.max_ghz is None else k.max_ghz * 1e9,
                    fp32_flops_per_cycle=k.fp32_flops_per_cycle)
        for k in c.clusters
    )
    peak32 = _tera(c.peak_tflops_fp32)
    if peak32 is None and clusters and all(k.peak_fp32_flops is not None for k in clusters):
        peak32 = float(sum(k.peak_fp32_flops or 0.0 for k in clusters))
    eff = _tera(c.effective_tflops)
    best_peak = max((p for p in (peak32, _tera(c.peak_tflops_fp16)) if p is not None),
                    default=None)
    if eff is not None and best_peak is not None and eff > best_peak:
        raise ValueError(f"unit {name!r}: effective {c.effective_tflops} TFLOP/s exceeds "
                         "its peak")
    return ComputeUnit(
        name=name, kind=c.kind, model=c.model, memory=c.memory, clusters=clusters,
        compute_units=c.compute_units, peak_fp32_flops=peak32,
        peak_fp16_flops=_tera(c.peak_tflops_fp16), peak_int8_ops=_tera(c.peak_tops_int8),
        effective_flops=eff, effective_bw=_gb(c.effective_bw_gb_s),
    )


def from_config(cfg: StaticHardwareConfig,
                cache_dir: str | os.PathLike | None = None) -> HardwareProfile:
    """HardwareProfile from a static yaml profile (the `_target_` of conf/hardware/*).
    `cache_dir`: every hardware loader's argument (`load_hardware`); a static profile
    measures nothing, so keeps nothing there."""
    if not cfg.memories or not cfg.units:
        raise ValueError(f"hardware {cfg.name!r}: needs `memories` and `units`")
    link = None
    if cfg.link is not None:
        link = Link(kind=cfg.link.kind, h2d_peak_bw=_gb(cfg.link.h2d_peak_gb_s),
                    h2d_effective_bw=cfg.link.h2d_effective_gb_s * GB,
                    d2h_peak_bw=_gb(cfg.link.d2h_peak_gb_s),
                    d2h_effective_bw=cfg.link.d2h_effective_gb_s * GB)
    return HardwareProfile(
        name=cfg.name, description=cfg.description,
        memories={k: _tier(k, v) for k, v in cfg.memories.items()},
        units={k: _unit(k, v) for k, v in cfg.units.items()},
        host=cfg.host, accelerator=cfg.accelerator, link=link,
        sync_s=cfg.sync_us * 1e-6, launch_s=cfg.launch_us * 1e-6, source="static",
    )
