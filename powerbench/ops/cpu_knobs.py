"""Run-time tuning knobs of the compiled CPU kernels (``csrc/cpu_knobs.h``): prefetch
distance, the bytes each row slot streams per claimed chunk, how long pool helpers spin
before sleeping, whether an operator wakes them on entry, and how long before the next job
is due a sleeping helper wakes by the clock. The kernels read them at
every call, so the operator benchmark times several settings side by side in one process
(``bench-operators 'task.variants=[default,prefetch_bytes:4096+spin_us:2000]'``), where
separate processes on a shared VM differ by more than the effect.

A variant is written ``name:value[+name:value...]`` (``=`` also works where it need not pass
through a Hydra override); this module parses and checks it against the names and ranges
the extension reports, so the rule is testable without a build.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


class CpuKnobError(ValueError):
    """A knob setting names an unknown knob or a value outside its range."""


@dataclass(frozen=True)
class KnobSpec:
    name: str
    default: int
    lo: int
    hi: int


def knob_specs(names: Sequence[str], ranges: Sequence[int]) -> tuple[KnobSpec, ...]:
    """The extension's knobs: names and flattened (default, lo, hi) triplets."""
    return tuple(KnobSpec(n, *ranges[3 * i: 3 * i + 3]) for i, n in enumerate(names))


def parse_variant(text: str, specs: Sequence[KnobSpec]) -> dict[str, int]:
    """``"prefetch_bytes:4096+spin_us:2000"`` -> {name: value}; "" or "default" -> {}."""
    text = text.strip()
    if text in ("", "default"):
        return {}
    values: dict[str, int] = {}
    for part in text.split("+"):
        name, sep, raw = part.replace("=", ":").partition(":")
        name = name.strip()
        try:
            values[name] = int(raw.strip()) if sep else int("x")
        except ValueError:
            raise CpuKnobError(f"CPU knob variant {text!r}: {part.strip()!r} is not "
                               f"name:<integer>") from None
    check_knobs(values, specs)
    return values


def check_knobs(values: Mapping[str, int], specs: Sequence[KnobSpec]) -> None:
    """Raise :class:`CpuKnobError` naming the knob and the valid names or range."""
    by_name = {s.name: s for s in specs}
    for name, value in values.items():
        spec = by_name.get(name)
        if spec is None:
            raise CpuKnobError(f"CPU knob {name!r} is unknown; valid: "
                               f"{', '.join(by_name)}")
        if not spec.lo <= value <= spec.hi:
            raise CpuKnobError(f"CPU knob {name}={value} is outside [{spec.lo}, {spec.hi}] "
                               f"(default {spec.default})")


def knob_vector(values: Mapping[str, int], specs: Sequence[KnobSpec]) -> list[int]:
    """Every knob's value in the extension's order: `values` over the defaults."""
    check_knobs(values, specs)
    return [values.get(s.name, s.default) for s in specs]
