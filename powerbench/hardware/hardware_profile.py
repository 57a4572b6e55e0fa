"""The HardwareProfile: memory tiers and compute units of one machine, in SI units.

Bytes, bytes/s, FLOP/s and seconds throughout. Datasheet peaks and effective (derated or
measured) values are separate fields; decode is memory-bound, so the placement solvers
and the cost model read the *effective* bandwidths. YAML profiles (conf/hardware) are
written in GB, GB/s, TFLOP/s and microseconds and converted by
`powerbench.hardware.static.from_config`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

GB = 1e9


@dataclass(frozen=True)
class MemoryTier:
    """One memory (DRAM, VRAM, HBM, LPDDR) or storage (flash) tier."""

    name: str
    kind: str
    capacity_bytes: float
    reserved_bytes: float  # OS / driver / runtime share not available to the model
    peak_bw: float | None  # datasheet bytes/s (None: unknown, e.g. a measured machine)
    effective_bw: float  # derated or measured bytes/s
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def usable_bytes(self) -> float:
        return max(self.capacity_bytes - self.reserved_bytes, 0.0)


@dataclass(frozen=True)
class CoreCluster:
    """A group of identical cores (big.LITTLE, P/E cores)."""

    name: str
    cores: int
    threads_per_core: int = 1
    max_hz: float | None = None
    fp32_flops_per_cycle: float | None = None  # per core

    @property
    def threads(self) -> int:
        return self.cores * self.threads_per_core

    @property
    def peak_fp32_flops(self) -> float | None:
        if self.max_hz is None or self.fp32_flops_per_cycle is None:
            return None
        return self.cores * self.max_hz * self.fp32_flops_per_cycle


@dataclass(frozen=True)
class KernelRates:
    """What the host's ENGINE kernels achieve at one weight dtype and thread count, measured
    on `local` (powerbench.measure.local_kernels) at real-size shapes: the rates the cost
    model charges a CPU engine of that dtype and thread count (the tier's bandwidth and the
    unit's GEMM figure are generic microbenchmarks of other kernels)."""

    dtype: str  # fp32 | fp16 | bf16
    threads: int
    stream_bw: float  # bytes/s: batch-1 products streaming a working set far beyond the LLC
    gemm_flops: float  # FLOP/s: one layer's products for a prompt (rows x real widths)
    attention_flops: float  # FLOP/s: causal attention scores over the prompt (4 h d pairs)
    op_s: float  # seconds per operator issued from Python (dispatch, thread wake-up, barrier)
    sparse_call_s: float  # fused sparse FFN call: fixed seconds beyond one operator
    shape: dict[str, int] = field(default_factory=dict)  # the shapes measured
    samples: dict[str, list[float]] = field(default_factory=dict)  # rate -> each sample


@dataclass(frozen=True)
class ComputeUnit:
    """A CPU, GPU or NPU and the memory tier it reads weights from."""

    name: str
    kind: str  # cpu | gpu | npu
    model: str
    memory: str  # name of a MemoryTier
    clusters: tuple[CoreCluster, ...] = ()
    compute_units: int | None = None  # GPU SMs / NPU cores
    peak_fp32_flops: float | None = None
    peak_fp16_flops: float | None = None  # tensor/matrix units, FP16 accumulate
    peak_int8_ops: float | None = None
    effective_flops: float | None = None  # sustained (derated or measured GEMM)
    # attention scores (QK^T, softmax, PV) sustained FLOP/s; None: effective_flops. Small
    # fused-attention kernels run far below GEMM rate (measured on `local` by validation)
    effective_attention_flops: float | None = None
    effective_bw: float | None = None  # what this unit achieves from its tier (None: tier's)
    gemv_flops: dict[int, float] = field(default_factory=dict)  # threads -> measured FLOP/s
    kernels: tuple[KernelRates, ...] = ()  # engine kernel rates by (dtype, threads), `local`

    @property
    def cores(self) -> int:
        return sum(c.cores for c in self.clusters)

    def kernel(self, dtype: str, threads: int | None) -> KernelRates | None:
        """Measured engine rates for `dtype` at the largest measured thread count <=
        `threads` (None: the most threads measured); None if `dtype` was not measured."""
        rates = [k for k in self.kernels if k.dtype == dtype]
        if not rates:
            return None
        if threads is None:
            return max(rates, key=lambda k: k.threads)
        fit = [k for k in rates if k.threads <= threads]
        return max(fit, key=lambda k: k.threads) if fit else min(rates, key=lambda k: k.threads)

    @property
    def threads(self) -> int:
        return sum(c.threads for c in self.clusters)


@dataclass(frozen=True)
class Link:
    """Host <-> device interconnect (None on unified-memory SoCs)."""

    kind: str  # pcie | nvlink | ...
    h2d_peak_bw: float | None
    h2d_effective_bw: float
    d2h_peak_bw: float | None
    d2h_effective_bw: float


@dataclass(frozen=True)
class HardwareProfile:
    """One machine. `host` runs the CPU side; `accelerator` (None: none) is PowerInfer's
    "GPU" unit: the device hot neurons are preloaded on."""

    name: str
    description: str
    memories: dict[str, MemoryTier]
    units: dict[str, ComputeUnit]
    host: str
    accelerator: str | None
    link: Link | None
    sync_s: float  # one CPU <-> accelerator synchronisation (T_sync)
    launch_s: float  # one kernel / graph launch
    thread_sync_s: float | None = None  # CPU worker-team barrier (measured on `local`)
    source: str = "static"  # static | measured
    measured_at: str | None = None
    fingerprint: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.host not in self.units:
            raise ValueError(f"hardware {self.name!r}: host {self.host!r} is not a unit "
                             f"(units: {sorted(self.units)})")
        if self.accelerator is not None and self.accelerator not in self.units:
            raise ValueError(f"hardware {self.name!r}: accelerator {self.accelerator!r} is not "
                             f"a unit (units: {sorted(self.units)})")
        for unit in self.units.values():
            if unit.memory not in self.memories:
                raise ValueError(f"hardware {self.name!r}: unit {unit.name!r} reads memory "
                                 f"{unit.memory!r}, which is not a tier "
                                 f"(tiers: {sorted(self.memories)})")
        if self.accelerator is not None and not self.unified and self.link is None:
            raise ValueError(f"hardware {self.name!r}: a discrete accelerator needs a `link`")
        for label, value in (("sync_s", self.sync_s), ("launch_s", self.launch_s)):
            if not value >= 0:
                raise ValueError(f"hardware {self.name!r}: {label} must be >= 0, got {value}")

    # ---- roles --------------------------------------------------------------------------
    @property
    def cpu(self) -> ComputeUnit:
        return self.units[self.host]

    @property
    def gpu(self) -> ComputeUnit | None:
        return self.units[self.accelerator] if self.accelerator is not None else None

    @property
    def has_accelerator(self) -> bool:
        return self.accelerator is not None

    @property
    def unified(self) -> bool:
        """Host and accelerator share one memory tier (mobile SoCs)."""
        gpu = self.gpu
        return gpu is not None and gpu.memory == self.cpu.memory

    def memory_of(self, unit: ComputeUnit) -> MemoryTier:
        return self.memories[unit.memory]

    def bandwidth(self, unit: ComputeUnit, effective: bool = True) -> float:
        """Bytes/s the unit streams weights at from its own memory tier."""
        tier = self.memory_of(unit)
        if effective:
            return unit.effective_bw if unit.effective_bw is not None else tier.effective_bw
        return tier.peak_bw if tier.peak_bw is not None else tier.effective_bw

    @property
    def cpu_bw(self) -> float:
        return self.bandwidth(self.cpu)

    @property
    def gpu_bw(self) -> float | None:
        return self.bandwidth(self.gpu) if self.gpu is not None else None

    @property
    def cpu_capacity(self) -> float:
        """Usable bytes of the host's memory tier."""
        return self.memory_of(self.cpu).usable_bytes

    @property
    def gpu_capacity(self) -> float:
        """Usable bytes of the accelerator's tier (0 without one; the shared pool if unified)."""
        gpu = self.gpu
        return self.memory_of(gpu).usable_bytes if gpu is not None else 0.0

    def summary(self) -> dict[str, float]:
        """Flat numbers for logging (MLflow params/metrics)."""
        out: dict[str, float] = {
            "hw_cpu_bw_gb_s": self.cpu_bw / GB,
            "hw_cpu_capacity_gb": self.cpu_capacity / GB,
            "hw_sync_us": self.sync_s * 1e6,
            "hw_launch_us": self.launch_s * 1e6,
        }
        if self.gpu is not None:
            out["hw_gpu_bw_gb_s"] = (self.gpu_bw or 0.0) / GB
            out["hw_gpu_capacity_gb"] = self.gpu_capacity / GB
        if self.link is not None:
            out["hw_h2d_gb_s"] = self.link.h2d_effective_bw / GB
            out["hw_d2h_gb_s"] = self.link.d2h_effective_bw / GB
        return out

    # ---- (de)serialisation ---------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HardwareProfile:
        data = dict(data)
        memories = {k: MemoryTier(**v) for k, v in data.pop("memories").items()}
        units = {}
        for key, raw in data.pop("units").items():
            raw = dict(raw)
            clusters = tuple(CoreCluster(**c) for c in raw.pop("clusters", ()))
            gemv = {int(t): float(v) for t, v in raw.pop("gemv_flops", {}).items()}
            kernels = tuple(KernelRates(**k) for k in raw.pop("kernels", ()))
            units[key] = ComputeUnit(clusters=clusters, gemv_flops=gemv, kernels=kernels,
                                     **raw)
        link = data.pop("link", None)
        return cls(memories=memories, units=units,
                   link=Link(**link) if link is not None else None, **data)
