"""Experiment tracking in MLflow (embedded SQLite store by default)."""

from powerbench.tracking.store import default_tracking_uri, resolve_uri, ui_command
from powerbench.tracking.tracker import Tracker, flatten

__all__ = ["Tracker", "default_tracking_uri", "flatten", "resolve_uri", "ui_command"]
