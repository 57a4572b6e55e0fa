"""Solver yamls compose against their schemas and reach their solver through `_target_`."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose
from hydra.errors import ConfigCompositionException

from powerbench.config import group_config, typed
from powerbench.config.store import GROUP_MODULES
from powerbench.hardware import load_hardware
from powerbench.paths import repo_root
from powerbench.solver import solve

from .conftest import BARE, machine, random_profile, tiny_spec

CONF = str(repo_root() / "conf")
NAMES = sorted(p.stem for p in (Path(CONF) / "solver").glob("*.yaml"))


pytestmark = pytest.mark.usefixtures("hydra_conf")


def test_every_schema_has_a_yaml():
    import importlib

    schemas = {name for module in GROUP_MODULES["solver"]
               for name in importlib.import_module(module).SCHEMAS}
    assert NAMES == sorted(schemas)


@pytest.mark.parametrize("name", NAMES)
def test_solver_yaml_composes_and_solves(name):
    cfg = compose(config_name="config", overrides=[f"solver={name}"])
    assert cfg.solver.name == name
    spec = tiny_spec()
    hw = machine(gpu_bytes=1e6, cpu_bytes=1e6)
    if name == "pi2_planner":  # plans phone cores and flash: needs a phone profile
        hw = load_hardware(group_config("hardware", "oneplus12"))
    for key, value in BARE.items():
        if key in cfg.solver:
            cfg.solver[key] = value
    placement = solve(typed(cfg).solver, spec, random_profile(spec, 0), hw)
    assert placement.solver == name


def test_typo_fails_at_composition():
    with pytest.raises(ConfigCompositionException):
        compose(config_name="config", overrides=["solver=ilp", "solver.grup_size=64"])
    with pytest.raises(ConfigCompositionException):
        compose(config_name="config", overrides=["solver=ilp", "solver.backend=glpk"])
    with pytest.raises(ConfigCompositionException):
        compose(config_name="config", overrides=["solver=ilp", "solver.group_size=many"])


def test_solver_config_by_name_applies_overrides():
    node = group_config("solver", "ilp", group_size=64)
    assert node.group_size == 64 and node._target_.endswith("solve_ilp")
    with pytest.raises(ConfigCompositionException, match="Available options"):
        group_config("solver", "nope")
