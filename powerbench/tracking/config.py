"""Typed schema for the `tracking` config group."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TrackingConfig:
    _target_: str = "powerbench.tracking.tracker.Tracker"
    uri: str | None = None  # None: the embedded SQLite store in the cache dir
    experiment: str = "powerbench"
    enabled: bool = True


SCHEMAS = {"mlflow": TrackingConfig}
