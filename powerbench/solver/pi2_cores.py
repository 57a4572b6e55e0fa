"""Core planning of PowerInfer-2's offline planner: which CPU clusters compute decode and
which core class issues the flash reads.

Compute set: the fastest clusters whose sustained FLOP/s covers the CPU's DRAM bandwidth
for the weights' arithmetic intensity (decode is memory-bound, so more cores add nothing).

I/O core (flash-aware): UFS 4 KB random-read bandwidth depends on the issuing core class
(oneplus12: big 1.076, mid 1.008, little 0.762 GB/s, PowerInfer-2's measurement), so the
I/O thread is either put on an idle core (no compute lost, but maybe a slow class) or on a
core taken from the compute set (faster reads, less decode FLOP/s). Each option is scored
with the planner's per-token estimate

    t_other   = attention, predictor, output bytes / CPU DRAM BW * max(1, need / FLOP/s)
    t_ffn     = FFN bytes touched per token / CPU DRAM BW * max(1, need / FLOP/s left)
    t_io      = expected missed clusters x read time from that core class (flash_io)
    t_token   = t_other + max(t_ffn, t_io) with the I/O-compute pipeline (powerinfer2),
                t_other + t_ffn + t_io without (llmflash, mmap)

An I/O core taken from a computing cluster is lost only while reads are in flight (the
FFN phase): the reads of a layer are issued after its predictor has run, so during
attention and the predictors the I/O thread has nothing to issue and the core computes
(simulator=phone charges the same: CorePlan.io_flops).

and the least wins (jointly with the cluster size, pi2_planner). The scores are logged.
"""

from __future__ import annotations

from dataclasses import dataclass

from powerbench.hardware.flash_rates import CORE_CLASSES
from powerbench.hardware.hardware_profile import HardwareProfile
from powerbench.model.spec import bytes_per_param
from powerbench.solver.pi2_config import PI2PlannerConfig
from powerbench.solver.problem import PlacementProblem


@dataclass(frozen=True)
class CoreCluster:
    name: str
    core_class: str  # big | mid | little (by per-core peak rank)
    cores: int
    flops: float  # sustained FLOP/s of the whole cluster


@dataclass(frozen=True)
class ComputeSet:
    clusters: tuple[CoreCluster, ...]
    need_flops: float  # FLOP/s that keep up with the CPU's DRAM bandwidth
    why: str

    @property
    def flops(self) -> float:
        return float(sum(c.flops for c in self.clusters))


@dataclass(frozen=True)
class IOOption:
    """Flash reads issued from `core_class`; `compute_flops`: decode FLOP/s left (lower than
    the compute set's when the I/O cores are taken from a computing cluster)."""

    core_class: str
    taken_from: str | None  # compute cluster giving up cores, None: an idle cluster
    compute_flops: float

    @property
    def label(self) -> str:
        return f"{self.core_class} ({'from ' + self.taken_from if self.taken_from else 'idle'})"


def core_classes(hw: HardwareProfile) -> list[CoreCluster]:
    """CPU clusters fastest per core first; classes by rank: big, mid, little (the rest
    little). Sustained = peak x the unit's effective / peak ratio (1 without one)."""
    unit = hw.cpu
    clusters = [c for c in unit.clusters if c.peak_fp32_flops]
    if not clusters:
        raise ValueError(f"hardware {hw.name!r}: the CPU lists no clusters with FLOP figures")
    peak = sum(c.peak_fp32_flops for c in clusters)
    ratio = (unit.effective_flops / peak) if unit.effective_flops else 1.0
    ordered = sorted(clusters, key=lambda c: -c.peak_fp32_flops / c.cores)
    return [CoreCluster(c.name, CORE_CLASSES[min(i, 2)], c.cores, c.peak_fp32_flops * ratio)
            for i, c in enumerate(ordered)]


def compute_set(cfg: PI2PlannerConfig, problem: PlacementProblem) -> ComputeSet:
    hw = problem.hardware
    classes = core_classes(hw)
    need = 2.0 / bytes_per_param(problem.weight_dtype) * hw.bandwidth(hw.cpu)
    if cfg.compute_clusters is not None:
        unknown = set(cfg.compute_clusters) - {c.name for c in classes}
        if unknown:
            raise ValueError(f"solver.compute_clusters {sorted(unknown)} not among "
                             f"{[c.name for c in classes]} of {hw.name}")
        return ComputeSet(tuple(c for c in classes if c.name in cfg.compute_clusters), need,
                          "configured")
    chosen: list[CoreCluster] = []
    for c in classes:
        chosen.append(c)
        if sum(x.flops for x in chosen) >= need:
            break
    why = (f"fastest clusters covering {need / 1e9:.0f} GFLOP/s (2 FLOP per "
           f"{bytes_per_param(problem.weight_dtype):.3g} B weight at the CPU's "
           f"{hw.bandwidth(hw.cpu) / 1e9:.1f} GB/s)")
    return ComputeSet(tuple(chosen), need, why)


def io_options(cfg: PI2PlannerConfig, hw: HardwareProfile, compute: ComputeSet
               ) -> list[IOOption]:
    """Per core class, the cheapest place for the I/O thread(s): an idle cluster of that
    class, else `io_cores` cores taken from the computing cluster of that class.
    `solver.io_core` restricts the options to one class."""
    if cfg.io_core is not None and cfg.io_core not in CORE_CLASSES:
        raise ValueError(f"solver.io_core {cfg.io_core!r} is not one of {CORE_CLASSES}")
    names = {c.name for c in compute.clusters}
    out: dict[str, IOOption] = {}
    for c in core_classes(hw):
        if cfg.io_core is not None and c.core_class != cfg.io_core:
            continue
        if c.name not in names:
            opt = IOOption(c.core_class, None, compute.flops)
        else:
            lost = c.flops * min(cfg.io_cores, c.cores) / c.cores
            opt = IOOption(c.core_class, c.name, compute.flops - lost)
        best = out.get(c.core_class)
        if best is None or opt.compute_flops > best.compute_flops:
            out[c.core_class] = opt
    if not out:
        raise ValueError(f"solver.io_core {cfg.io_core!r}: {hw.name} has no core of that class")
    return list(out.values())


def token_seconds(compute_s: tuple[float, float], need: float, full_flops: float,
                  flops: float, io_s: float, pipelined: bool) -> float:
    """The planner's per-token estimate (module docstring); compute_s = (other, FFN)
    seconds at full FLOP/s, `full_flops` the compute set's, `flops` what the FFN keeps."""
    other = compute_s[0] * max(1.0, need / max(full_flops, 1.0))
    ffn = compute_s[1] * max(1.0, need / max(flops, 1.0))
    return other + (max(ffn, io_s) if pipelined else ffn + io_s)
