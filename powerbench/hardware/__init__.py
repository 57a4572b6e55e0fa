"""Hardware profiles: static machine descriptions and the measured `local` machine."""

from powerbench.hardware.hardware_profile import (
    GB,
    ComputeUnit,
    CoreCluster,
    HardwareProfile,
    Link,
    MemoryTier,
)
from powerbench.hardware.load import load_hardware

__all__ = [
    "GB",
    "ComputeUnit",
    "CoreCluster",
    "HardwareProfile",
    "Link",
    "MemoryTier",
    "load_hardware",
]
