"""`load_hardware(cfg)`: a HardwareProfile built from a hardware config's `_target_`."""

from __future__ import annotations

from powerbench.build import build
from powerbench.hardware.config import LocalHardwareConfig, StaticHardwareConfig
from powerbench.hardware.hardware_profile import HardwareProfile


def load_hardware(
        cfg: HardwareProfile | StaticHardwareConfig | LocalHardwareConfig) -> HardwareProfile:
    """Build the typed config (static yaml -> `static.from_config`, `local` ->
    `local.load_local`); a HardwareProfile passes through."""
    if isinstance(cfg, HardwareProfile):
        return cfg
    profile = build(cfg)
    if not isinstance(profile, HardwareProfile):
        raise TypeError(f"{cfg._target_} returned {type(profile).__name__}, not a HardwareProfile")
    return profile
