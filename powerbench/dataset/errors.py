"""Errors of the data stage."""


class DatasetUnavailableError(RuntimeError):
    """A dataset cannot be read here (hub unreachable and not cached)."""


class DatasetError(ValueError):
    """A dataset that was read but cannot be used (the message names its file or source)."""
