"""Activation profiling: measured (forward hooks) and synthetic (published statistics)."""

from powerbench.profiling.activation_profile import (
    ActivationProfile,
    LayerProfile,
    coverage_share,
    pack_masks,
    unpack_masks,
)
from powerbench.profiling.profiler import profile_model
from powerbench.profiling.store import load_or_profile, load_profile, save_profile
from powerbench.profiling.synthetic import synthetic_profile

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
