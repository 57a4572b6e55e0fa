"""Hardware profiles: static machine descriptions and the measured `local` machine."""

from powerbench.hardware.hardware_profile import (
    GB,
    ComputeUnit,
    CoreCluster,
    HardwareProfile,
    Link,
    MemoryTier,
)
from powerbench.hardware.load import hardware_config, load_hardware

__all__ = [
    "GB",
    "ComputeUnit",
    "CoreCluster",
    "HardwareProfile",
    "Link",
    "hardware_config",
    "MemoryTier",
    "load_hardware",
]
