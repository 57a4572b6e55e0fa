"""Typed schemas for the `hardware` config group (registered in Hydra's ConfigStore).

Static profiles (`conf/hardware/<machine>.yaml`, schema `static`) are written in
human units: GB (1e9 bytes), GB/s, GHz, TFLOP/s and microseconds. `local` (schema
`local`) is measured on the running machine and cached.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from powerbench.schema_helpers import MISSING


@dataclass
class MemoryTierConfig:
    kind: str = MISSING  # ddr4 | ddr5 | gddr6 | gddr6x | hbm2e | lpddr5 | lpddr5x | ufs
    capacity_gb: float = MISSING
    reserved_gb: float = 0.0  # OS / driver / app limit: usable = capacity - reserved
    peak_bw_gb_s: float | None = None  # datasheet
    effective_bw_gb_s: float = MISSING  # derated or measured
    extra: dict[str, float] = field(default_factory=dict)  # further published figures


@dataclass
class CoreClusterConfig:
    name: str = MISSING
    cores: int = MISSING
    threads_per_core: int = 1
    max_ghz: float | None = None
    fp32_flops_per_cycle: float | None = None  # per core (FMA = 2 FLOP per lane)


@dataclass
class ComputeUnitConfig:
    kind: str = MISSING  # cpu | gpu | npu
    model: str = ""
    memory: str = MISSING  # key into `memories`
    clusters: list[CoreClusterConfig] = field(default_factory=list)
    compute_units: int | None = None  # GPU SMs / NPU cores
    peak_tflops_fp32: float | None = None  # None: sum over clusters when they give clocks
    peak_tflops_fp16: float | None = None
    peak_tops_int8: float | None = None
    effective_tflops: float | None = None
    effective_bw_gb_s: float | None = None  # this unit's achievable bandwidth (None: tier's)


@dataclass
class LinkConfig:
    kind: str = "pcie"
    h2d_peak_gb_s: float | None = None
    h2d_effective_gb_s: float = MISSING
    d2h_peak_gb_s: float | None = None
    d2h_effective_gb_s: float = MISSING


@dataclass
class StaticHardwareConfig:
    _target_: str = "powerbench.hardware.static.from_config"
    name: str = MISSING
    description: str = ""
    host: str = "cpu"
    accelerator: str | None = "gpu"
    memories: dict[str, MemoryTierConfig] = field(default_factory=dict)
    units: dict[str, ComputeUnitConfig] = field(default_factory=dict)
    link: LinkConfig | None = None
    sync_us: float = MISSING  # one CPU <-> accelerator synchronisation
    launch_us: float = MISSING  # one kernel / graph launch


@dataclass
class LocalHardwareConfig:
    """The running machine, measured by short microbenchmarks and cached as JSON."""

    # the measurement layer's loader: the generic microbenchmarks plus the engines' kernels
    # (kernel_dtypes empty: only the generic ones, powerbench.hardware.local)
    _target_: str = "powerbench.measure.local_kernels.load_local"
    name: str = "local"
    remeasure: bool = False  # ignore the cache and measure again
    cache_file: str | None = None  # default: <cache_dir>/hardware/local.json
    mem_mb: int = 256  # buffer streamed by the read-bandwidth test
    gemv_dim: int = 4096  # square fp32 matrix for the GEMV test
    gemm_dim: int = 512  # square fp32 matrices for the FLOP/s test
    repeats: int = 5  # best-of repeats per microbenchmark
    threads: list[int] | None = None  # GEMV thread counts (None: 1, 2, 4, ... and all)
    sync_iters: int = 2000  # thread ping-pong round trips
    cuda: bool = True  # also measure the GPU when torch sees one
    cuda_copy_mb: int = 256
    # storage tier `flash`: random O_DIRECT reads of a scratch file (deleted after)
    storage: bool = True
    storage_mb: int = 256  # scratch file size
    storage_dir: str | None = None  # default: <cache_dir>/hardware
    storage_queue_depths: list[int] = field(default_factory=lambda: [1, 4, 16])
    storage_seconds: float = 0.2  # per (block size, queue depth) point
    # the engines' own kernels (measured by the target, powerbench.measure.local_kernels;
    # [] measures none): per weight dtype x thread count (None: 1 and all),
    # at real-size shapes: [ffn, width] matrices streamed over `kernel_working_set_mb` (far
    # beyond any last-level cache), a prompt of `kernel_prompt_rows` rows, attention over
    # it with `kernel_heads` x `kernel_head_dim` (OPT-1.3B's shapes by default)
    kernel_dtypes: list[str] = field(default_factory=lambda: ["fp32", "fp16"])
    kernel_threads: list[int] | None = None
    kernel_width: int = 2048
    kernel_ffn: int = 8192
    kernel_working_set_mb: int = 768
    # the matrices streamed: `layer` (a decoder layer's Q/K/V, O, FFN up and down, as decode
    # reads them) or `ffn_up` ([kernel_ffn, kernel_width] only)
    kernel_stream: str = "layer"
    kernel_prompt_rows: int = 64
    kernel_heads: int = 32
    kernel_head_dim: int = 64
    kernel_repeats: int = 9  # best of repeats (the undisturbed machine: measured once)
    # every entry sampled `kernel_samples` times, the rounds (each entry once) spaced evenly
    # over `kernel_sample_window_s` seconds: each rate stored is the median of its samples,
    # the samples kept beside it (a VM's memory speed drifts in spells of minutes; their
    # spread is shown beside validate's errors). 1 sample: one round, no waiting
    kernel_samples: int = 7
    kernel_sample_window_s: float = 120.0  # first to last round's start (0: back to back)


SCHEMAS = {"static": StaticHardwareConfig, "local": LocalHardwareConfig}
