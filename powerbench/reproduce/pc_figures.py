"""Reproduction targets (see powerbench.reproduce.target)."""

from powerbench.reproduce.target import Target

TARGETS: tuple[Target, ...] = ()
