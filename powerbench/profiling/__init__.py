"""Activation profiling: measured (forward hooks) and synthetic (published statistics).

The profile types import with numpy alone; the profiler, store and synthetic profiles load
on first use (they need the model and config packages).
"""

from powerbench.build import lazy_attributes
from powerbench.profiling.activation_profile import (
    ActivationProfile,
    LayerProfile,
    coverage_share,
    pack_masks,
    unpack_masks,
)

_STORE = "powerbench.profiling.store"
_LAZY = {
    "profile_model": "powerbench.profiling.profiler", "load_or_profile": _STORE,
    "load_profile": _STORE, "save_profile": _STORE,
    "synthetic_profile": "powerbench.profiling.synthetic",
}
__getattr__ = lazy_attributes(__name__, _LAZY)

__all__ = [
    "ActivationProfile",
    "LayerProfile",
    "coverage_share",
    "load_or_profile",
    "load_profile",
    "profile_model",
    "save_profile",
    "pack_masks",
    "synthetic_profile",
    "unpack_masks",
]
