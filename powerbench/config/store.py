"""Registers every typed schema in Hydra's ConfigStore.

Each config group's package exposes `SCHEMAS = {schema_name: dataclass}` in its
`config` module; a group yaml selects its schema with
`defaults: [/schema/<group>/<schema_name>@_here_, _self_]`, so unknown keys and
wrong types fail at composition. Unknown *options* fail in Hydra itself, which lists
the available ones. Another installed package adds its schemas through an entry point
in the group `powerbench.config` (name: the config group, value: its module with
`SCHEMAS`); docs/extending.md shows one.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from hydra.core.config_store import ConfigStore

from powerbench.config.schema import PowerbenchConfig

# config group -> modules holding its SCHEMAS
GROUP_MODULES: dict[str, tuple[str, ...]] = {
    "model": ("powerbench.model.config",),
    "dataset": ("powerbench.dataset.config",),
    "engine": ("powerbench.engine.config", "powerbench.flash.config"),
    "simulator": ("powerbench.simulator.config", "powerbench.simulator.phone_config"),
    "task": ("powerbench.tasks.config",),
    "tracking": ("powerbench.tracking.config",),
    "hardware": ("powerbench.hardware.config",),
    "solver": ("powerbench.solver.config", "powerbench.solver.pi2_config"),
    "predictor": ("powerbench.predictor.config",),
}

ENTRY_POINT_GROUP = "powerbench.config"  # other packages: <config group> = <module>

_registered = False


def group_modules() -> dict[str, tuple[str, ...]]:
    """GROUP_MODULES plus the modules installed packages declare as entry points."""
    modules = dict(GROUP_MODULES)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name not in GROUP_MODULES:
            raise ValueError(f"entry point {ep.name} = {ep.value} (group {ENTRY_POINT_GROUP}"
                             f"): {ep.name!r} is not a config group; valid: "
                             f"{', '.join(GROUP_MODULES)}")
        modules[ep.name] = (*modules[ep.name], ep.value)
    return modules


def register_configs() -> None:
    global _registered
    if _registered:
        return
    cs = ConfigStore.instance()
    cs.store(name="powerbench_schema", node=PowerbenchConfig)
    for group, module_names in group_modules().items():
        for module_name in module_names:
            try:
                module = importlib.import_module(module_name)
            except ModuleNotFoundError as err:
                if module_name.startswith(str(err.name)):  # package not built yet
                    continue
                raise
            for name, node in module.SCHEMAS.items():
                cs.store(group=f"schema/{group}", name=name, node=node)
    _registered = True
