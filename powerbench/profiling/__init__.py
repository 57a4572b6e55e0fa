"""Activation profiling: measured (forward hooks) and synthetic (published statistics)."""

from powerbench.profiling.profile import ActivationProfile, LayerProfile, coverage_share

__all__ = ["ActivationProfile", "LayerProfile", "coverage_share"]
