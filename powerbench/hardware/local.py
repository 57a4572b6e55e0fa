"""The `local` hardware profile: the running machine, measured and cached.

`load_local(cfg, cache_dir=...)` returns the cached profile from `<cache_dir>/hardware/`
(the run's `cache_dir`, as the rest of the pipeline uses it; None: the default of
`powerbench.paths.cache_dir()`) when its checksum is intact, its machine fingerprint
matches this machine and it was measured with these settings. The file is `local.json`
for the default microbenchmark settings and `local-<hash of them>.json` for any other, so
a quick measurement never replaces the real one. Otherwise (or with `remeasure: true`) it
runs the microbenchmarks of `powerbench.hardware.microbench`
(a few seconds) and stores the result with the date and fingerprint.

`measure_kernels` (given by the `local` schema's target,
`powerbench.measure.local_kernels.load_local`): a function that measures the engines' own
kernels per (dtype, threads) at real-size shapes (`ComputeUnit.kernels`), sampled over a
window of minutes (the profile's meta `kernel_window`: when, and the load around it); the
measurement layer owns it because it runs engine code. A cached profile without them is
re-measured, and so is one whose `kernel_code` (the loader's hash of the code those
kernels run, recorded with the profile: the CPU extension's sources, the Python that picks
and calls them) differs from the code's now: a changed kernel changes the rates.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import platform
import shutil
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from powerbench.cache import ArtifactCache, stable_hash
from powerbench.hardware import microbench as mb
from powerbench.hardware.config import LocalHardwareConfig
from powerbench.hardware.facts import cpu_model, meminfo, usable_cpus
from powerbench.hardware.hardware_profile import (
    ComputeUnit,
    CoreCluster,
    HardwareProfile,
    KernelRates,
    Link,
    MemoryTier,
)
from powerbench.hardware.storage import measure_storage
from powerbench.load_window import LoadWindow
from powerbench.paths import cache_dir as resolve_cache_dir
from powerbench.threads import doubling_counts

KernelMeasure = Callable[[LocalHardwareConfig, int], tuple[KernelRates, ...]]

log = logging.getLogger(__name__)


# ---- facts about this machine -------------------------------------------------------------
def machine_facts() -> dict[str, Any]:
    """What identifies the machine (the fingerprint hashes these)."""
    mem = meminfo()
    facts: dict[str, Any] = {
        "machine": platform.machine(),
        "system": platform.system(),
        "cpu_model": cpu_model(),
        "logical_cpus": os.cpu_count() or 1,
        "usable_cpus": usable_cpus(),
        "mem_total_gb": round(mem.get("MemTotal", 0) / 1e9),
        "gpus": mb.cuda_device_names(),
    }
    return facts


def fingerprint(facts: dict[str, Any] | None = None) -> str:
    return stable_hash(facts if facts is not None else machine_facts())


def _thread_counts(cfg: LocalHardwareConfig, ncpu: int) -> list[int]:
    if cfg.threads:
        return sorted({max(1, int(t)) for t in cfg.threads})
    return doubling_counts(ncpu)


# ---- measurement --------------------------------------------------------------------------
def measure_local(cfg: LocalHardwareConfig | None = None,
                  measure_kernels: KernelMeasure | None = None,
                  cache_dir: str | os.PathLike | None = None) -> HardwareProfile:
    """Run the microbenchmarks now (no cache); `measure_kernels(cfg, cpus)`: the engine
    kernels' rates too (see the module docstring); `cache_dir`: where the storage test's
    scratch file goes unless `storage_dir` is set."""
    c = cfg if cfg is not None else LocalHardwareConfig()
    t0 = time.perf_counter()
    facts = machine_facts()
    ncpu = facts["usable_cpus"]
    mem = meminfo()
    total = float(mem.get("MemTotal", 0))
    available = float(mem.get("MemAvailable", total))

    read_bw = max(mb.memory_read_bw(c.mem_mb, threads=t, repeats=c.repeats)
                  for t in sorted({1, ncpu}))
    gemv = {t: mb.gemv_flops(c.gemv_dim, threads=t, repeats=c.repeats)
            for t in _thread_counts(c, ncpu)}
    gemm = mb.gemm_flops(c.gemm_dim, threads=ncpu, repeats=c.repeats)
    thread_sync = mb.thread_sync_latency(c.sync_iters)
    dispatch = mb.op_dispatch_latency()
    kernels: tuple[KernelRates, ...] = ()
    kernel_window = LoadWindow()
    if measure_kernels is not None:
        with kernel_window:
            kernels = measure_kernels(c, ncpu)

    memories = {"dram": MemoryTier(
        name="dram", kind="dram", capacity_bytes=total, reserved_bytes=max(total - available, 0),
        peak_bw=None, effective_bw=read_bw, extra={"available_at_measurement": available},
    )}
    units = {"cpu": ComputeUnit(
        name="cpu", kind="cpu", model=facts["cpu_model"], memory="dram",
        clusters=(CoreCluster(name="all", cores=ncpu),), effective_flops=gemm,
        gemv_flops=gemv, kernels=kernels,
    )}
    if c.storage:
        memories["flash"] = storage_tier(c, cache_dir)
    accelerator, link = None, None
    sync_s, launch_s = thread_sync, dispatch
    meta: dict[str, Any] = {"hostname": socket.gethostname(), "facts": facts}
    if kernels:  # when (UTC) and under what load the engine kernels were sampled
        meta["kernel_window"] = kernel_window.as_dict()
    if c.cuda and mb.cuda_available():
        info = mb.cuda_device_info()
        bw = mb.cuda_copy_bw(c.cuda_copy_mb, repeats=c.repeats)
        memories["vram"] = MemoryTier(
            name="vram", kind="vram", capacity_bytes=float(info["total_bytes"]),
            reserved_bytes=float(info["total_bytes"]) - float(info["free_bytes"]),
            peak_bw=None, effective_bw=bw["d2d"],
        )
        units["gpu"] = ComputeUnit(name="gpu", kind="gpu", model=str(info["name"]),
                                   memory="vram", compute_units=int(info["sm_count"]),
                                   effective_flops=mb.cuda_gemm_flops(repeats=c.repeats))
        link = Link(kind="pcie", h2d_peak_bw=None, h2d_effective_bw=bw["h2d"],
                    d2h_peak_bw=None, d2h_effective_bw=bw["d2h"])
        accelerator = "gpu"
        sync_s, launch_s = mb.cuda_sync_latency(), mb.cuda_launch_latency()
    meta["measure_seconds"] = time.perf_counter() - t0
    return HardwareProfile(
        name=c.name, description=f"measured: {facts['cpu_model']}"
        + (f" + {units['gpu'].model}" if accelerator else ""),
        memories=memories, units=units, host="cpu", accelerator=accelerator, link=link,
        sync_s=sync_s, launch_s=launch_s, thread_sync_s=thread_sync, source="measured",
        measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
        fingerprint=fingerprint(facts), meta=meta,
    )


def storage_tier(c: LocalHardwareConfig,
                 cache_dir: str | os.PathLike | None = None) -> MemoryTier:
    """The disk under `storage_dir` (default: <cache_dir>/hardware) as tier `flash` (kind
    ssd, or hdd if it spins): the best 512 KB random-read bandwidth as effective, every
    point in `extra`."""
    directory = (Path(c.storage_dir) if c.storage_dir
                 else resolve_cache_dir(cache_dir) / "hardware")
    st = measure_storage(directory, file_mb=c.storage_mb,
                         queue_depths=tuple(c.storage_queue_depths), seconds=c.storage_seconds)
    disk = shutil.disk_usage(directory)
    slow = st.result(4096, min(c.storage_queue_depths)).latency_s > 2e-3
    return MemoryTier(name="flash", kind="hdd" if st.rotational and slow else "ssd",
                      capacity_bytes=float(disk.total), reserved_bytes=float(disk.used),
                      peak_bw=None, effective_bw=st.best_bandwidth(512 * 1024),
                      extra={**st.figures(), "rotational": float(bool(st.rotational))})


# ---- cache --------------------------------------------------------------------------------
# settings that do not change what is measured (where it is kept, whether to re-measure)
NOT_MEASURED = ("_target_", "name", "remeasure", "cache_file")


def measurement_settings(c: LocalHardwareConfig) -> dict[str, Any]:
    """The microbenchmark settings a profile was measured with."""
    fields = dataclasses.asdict(c) if dataclasses.is_dataclass(c) else dict(c)
    return {k: v for k, v in fields.items() if k not in NOT_MEASURED}


def _cache(c: LocalHardwareConfig,
           cache_dir: str | os.PathLike | None = None) -> tuple[ArtifactCache, str]:
    """(cache, key): `cache_file` when given; else <cache_dir>/hardware/local.json for the
    default settings and local-<hash of the settings>.json for any other (a quick
    measurement never takes the place of the real one). `cache_dir` None: the default
    (`powerbench.paths.cache_dir`)."""
    if c.cache_file:
        path = Path(c.cache_file)
        return ArtifactCache(path.parent, suffix=path.suffix), path.stem
    settings = measurement_settings(c)
    key = ("local" if settings == measurement_settings(LocalHardwareConfig())
           else f"local-{stable_hash(settings)}")
    return ArtifactCache(resolve_cache_dir(cache_dir) / "hardware", suffix=".json"), key


def stale_reason(record: dict[str, Any], profile: HardwareProfile, c: LocalHardwareConfig,
                 kernels: bool, kernel_code: str | None) -> str | None:
    """Why the cached `record` (its `profile` parsed) cannot stand for this machine now,
    measured with settings `c` (`kernels`: with the engine kernels, run by `kernel_code`),
    or None if it can."""
    if record.get("fingerprint") != fingerprint():
        return "is for another machine"
    if record.get("settings", measurement_settings(c)) != \
            json.loads(json.dumps(measurement_settings(c))):
        return "was measured with other settings"
    if c.storage and "flash" not in profile.memories:
        return "lacks the storage tier"
    if kernels and not profile.cpu.kernels:
        return "lacks the engine kernels"
    if kernels and record.get("kernel_code") != kernel_code:
        return (f"has engine-kernel rates measured with other kernel code (code hash "
                f"{record.get('kernel_code') or 'not recorded'}, now {kernel_code})")
    return None


def load_local(cfg: LocalHardwareConfig | None = None,
               measure_kernels: KernelMeasure | None = None,
               cache_dir: str | os.PathLike | None = None,
               kernel_code: str | None = None, **_: Any) -> HardwareProfile:
    """Cached profile (under the run's `cache_dir`) or a fresh measurement (with the
    engine kernels when `measure_kernels` is given: a cached profile without them, or
    measured with other `kernel_code`, the hash of the code they run, is measured again)."""
    c = cfg if cfg is not None else LocalHardwareConfig()
    cache, key = _cache(c, cache_dir)
    kernels = measure_kernels is not None and bool(c.kernel_dtypes)
    if not c.remeasure and cache.valid(key):
        try:
            record = json.loads(cache.path(key).read_text())
            profile = HardwareProfile.from_dict(record["profile"])
            reason = stale_reason(record, profile, c, kernels, kernel_code)
            if reason is None:
                log.info("hardware: local profile from %s (measured %s)", cache.path(key),
                         record.get("date"))
                return profile
            log.info("hardware: cached local profile %s; remeasuring", reason)
        except (OSError, ValueError, KeyError, TypeError) as err:
            log.warning("hardware: unreadable %s (%s); remeasuring", cache.path(key), err)
    profile = measure_local(c, measure_kernels, cache_dir)
    record = {"date": profile.measured_at, "fingerprint": profile.fingerprint,
              "settings": measurement_settings(c), "profile": profile.to_dict()}
    if kernels:
        record["kernel_code"] = kernel_code
    cache.store(key, lambda p: p.write_text(json.dumps(record, indent=1)),
                meta={"date": profile.measured_at, "fingerprint": profile.fingerprint})
    log.info("hardware: measured local profile in %.1f s -> %s",
             profile.meta.get("measure_seconds", 0.0), cache.path(key))
    return profile
