"""Measurement: the one benchmark harness, and simulated-vs-measured comparisons."""
