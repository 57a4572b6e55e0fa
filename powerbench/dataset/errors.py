"""Errors of the data stage."""


class DatasetUnavailableError(RuntimeError):
    """A dataset cannot be read here (hub unreachable and not cached)."""
