"""`_target_` is written once per option: in the schema's default, or (where the schema
has none, as for models and datasets) in the option's yaml, never in both, and no engine
yaml names its FFN class (the typed FFN config does)."""

from __future__ import annotations

import dataclasses
import importlib
import re
from pathlib import Path

import pytest
from omegaconf import MISSING

from powerbench.config.store import GROUP_MODULES

CONF = Path(__file__).resolve().parents[2] / "conf"


def schemas() -> dict[tuple[str, str], type]:
    found = {}
    for group, modules in GROUP_MODULES.items():
        for module in modules:
            for name, cls in importlib.import_module(module).SCHEMAS.items():
                found[(group, name)] = cls
    return found


YAMLS = sorted(p for group in GROUP_MODULES for p in (CONF / group).glob("*.yaml"))


@pytest.mark.parametrize("path", YAMLS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_target_is_written_once(path: Path):
    text = path.read_text()
    schema = re.search(r"/schema/(\w+)/(\w+)@", text)
    assert schema, f"{path} selects no schema (/schema/<group>/<name>@_here_)"
    cls = schemas()[(schema.group(1), schema.group(2))]
    default = {f.name: f.default for f in dataclasses.fields(cls)}.get("_target_", MISSING)
    in_yaml = re.search(r"^\s*_target_:", text, re.M)
    if default == MISSING:
        assert in_yaml, f"{path}: its schema {cls.__name__} has no _target_; the yaml names it"
    else:
        assert not in_yaml, (f"{path}: _target_ is {cls.__name__}'s default "
                             f"({default}); don't repeat it in the yaml")
