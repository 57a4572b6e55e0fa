"""Hardware profiles: static machine descriptions and the measured `local` machine."""

from powerbench.hardware.load import hardware_config, load_hardware
from powerbench.hardware.profile import (
    GB,
    ComputeUnit,
    CoreCluster,
    HardwareProfile,
    Link,
    MemoryTier,
)

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
