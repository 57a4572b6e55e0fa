"""Helpers for the typed config schemas, standard library only (the engine, operator and
flash packages import their schemas without OmegaConf).

MISSING: OmegaConf's marker of a mandatory value (`omegaconf.MISSING` is this string).
coerce_enums: enum-typed fields given as strings (a config built in Python) become
members; Hydra's typed configs already hold members, but `Options(mode="dense")` written
by hand would otherwise hold a string that `is Mode.dense` never matches.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Sequence
from enum import Enum
from functools import cache

MISSING = "???"


@cache
def _enum_fields(cls: type) -> tuple[tuple[str, type[Enum]], ...]:
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name]) for f in dataclasses.fields(cls)
                 if isinstance(hints[f.name], type) and issubclass(hints[f.name], Enum))


def coerce_enums(obj: object) -> None:
    """Call from `__post_init__`: every enum field's value becomes its enum member."""
    for name, enum in _enum_fields(type(obj)):
        value = getattr(obj, name)
        if value is not None and not isinstance(value, enum):
            object.__setattr__(obj, name, enum(value))


class UserError(Exception):
    """An error in what was asked for (a setting, a model too large for its budget) whose
    message says what to change: `powerbench` prints the message without a traceback
    (HYDRA_FULL_ERROR=1 shows it); every other exception keeps its traceback. The one list
    of them is this class's subclasses: each also derives from the built-in error it is."""


class ConfigRangeError(UserError, ValueError):
    """A setting outside its valid range (the message names the setting and the range)."""


class MissingSettingError(UserError, ValueError):
    """A setting that another one needs is unset (the message names it and its options)."""


def check_range(setting: str, value: float | None, low: float | None = None,
                high: float | None = None, *, low_open: bool = False) -> None:
    """Raise ConfigRangeError unless `low <= value <= high` (`low < value` with `low_open`);
    None bounds are unbounded and a None value is allowed. Call it from `__post_init__`,
    so a bad value fails when the config is composed, before any work."""
    if value is None:
        return
    below = low is not None and (value <= low if low_open else value < low)
    above = high is not None and value > high
    if below or above:
        lo = "" if low is None else f"{low} {'<' if low_open else '<='} "
        hi = "" if high is None else f" <= {high}"
        raise ConfigRangeError(f"{setting}={value} is out of range; valid: {lo}{setting}{hi}")


def parse_shape(setting: str, text: str) -> tuple[int, int]:
    """``"4096x16384"`` -> (d_model, d_ffn); ConfigRangeError naming `setting` unless the
    text is two positive integers joined by an x."""
    d_model, sep, d_ffn = str(text).lower().partition("x")
    if not (sep and d_model.isdigit() and d_ffn.isdigit() and int(d_model) and int(d_ffn)):
        raise ConfigRangeError(f"{setting}={text!r} is not d_model x d_ffn, e.g. 4096x16384")
    return int(d_model), int(d_ffn)


def check_choice(setting: str, value: str | None, valid: Sequence[str]) -> None:
    """ConfigRangeError naming `setting` and the valid values unless `value` is one of them
    (None passes: the default). Called from `__post_init__`, so a bad value fails when the
    config is composed, before any work."""
    if value is not None and value not in valid:
        raise ConfigRangeError(f"{setting}={value!r} is not an option; valid: "
                               f"{', '.join(valid)}")
