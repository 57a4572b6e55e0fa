"""Run names: the chosen config options plus the values a sweep varies, never where the run
is tracked (`tracking`) or the task. E.g. a `bench.new_tokens=8,16` sweep of the default
run names its jobs `sharegpt-dense-tiny_relu-new_tokens=8` and `...-new_tokens=16`.

The sweep callback stores the swept keys in $POWERBENCH_SWEPT_KEYS before the first job
(launcher workers inherit it); each job reads its own values from its Hydra overrides.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

SWEPT_ENV = "POWERBENCH_SWEPT_KEYS"
NOT_IN_NAME = ("tracking", "task")  # where a run is logged, and the task: not what it ran


def sweep_overrides(overrides: Iterable[str], sweeper_params: Mapping[str, str] | None = None
                    ) -> dict[str, Any]:
    """The override each key of a multirun ends with, by key: the sweeper's `params` first,
    then the command line, a later override replacing an earlier one for the same key (as
    Hydra's basic sweeper does: `experiment=fig13 model=opt_66b` runs one model)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    lines = [*(f"{k}={v}" for k, v in (sweeper_params or {}).items()), *overrides]
    return {o.get_key_element(): o for o in OverridesParser.create().parse_overrides(lines)}


def swept_keys(overrides: Iterable[str], sweeper_params: Mapping[str, str] | None = None
               ) -> list[str]:
    """Keys that take several values in a multirun: from the command line overrides
    (`bench.new_tokens=8,16`, `range(...)`, `choice(...)`) and the sweeper's `params`, a key
    that the command line fixes to one value left out."""
    return [o.key_or_group for o in sweep_overrides(overrides, sweeper_params).values()
            if o.is_sweep_override()]


def publish_swept_keys(keys: list[str]) -> None:
    os.environ[SWEPT_ENV] = json.dumps(keys)


def job_swept_values(job_overrides: Iterable[str]) -> list[str]:
    """`leaf=value` for each swept config value (not group choices: those name the run
    anyway) in this job's overrides, e.g. ['new_tokens=8']."""
    keys = set(json.loads(os.environ.get(SWEPT_ENV, "[]")))
    values = []
    for override in job_overrides:
        key, _, value = override.partition("=")
        key = key.lstrip("+~")
        if key in keys and "." in key:
            values.append(f"{key.rsplit('.', 1)[-1]}={value}")
    return values


def run_name(choices: Mapping[str, str | None], swept: Iterable[str] = ()) -> str:
    """`<option>-<option>-...-<key>=<value>`: group choices (tracking and task left out)
    then the swept values."""
    parts = [str(v) for k, v in choices.items() if v is not None and k not in NOT_IN_NAME]
    return "-".join([*parts, *swept]) or "run"
