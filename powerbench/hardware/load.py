"""`load_hardware(cfg, cache_dir=...)`: a HardwareProfile built from a hardware config's
`_target_`."""

from __future__ import annotations

import os

from powerbench.build import build
from powerbench.hardware.config import LocalHardwareConfig, StaticHardwareConfig
from powerbench.hardware.hardware_profile import HardwareProfile


def load_hardware(cfg: HardwareProfile | StaticHardwareConfig | LocalHardwareConfig,
                  cache_dir: str | os.PathLike | None = None) -> HardwareProfile:
    """Build the typed config: every hardware `_target_` is called the same way,
    `target(cfg, cache_dir=cache_dir)` (static yaml -> `static.from_config`, which keeps
    nothing; `local` -> `powerbench.measure.local_kernels.load_local`, cached under
    `cache_dir`: the run's `cache_dir` setting, None its default); a HardwareProfile
    passes through."""
    if isinstance(cfg, HardwareProfile):
        return cfg
    profile = build(cfg, cache_dir=cache_dir)
    if not isinstance(profile, HardwareProfile):
        raise TypeError(f"{cfg._target_} returned {type(profile).__name__}, not a HardwareProfile")
    return profile
