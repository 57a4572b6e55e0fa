"""`load_hardware(cfg)`: a HardwareProfile from a hardware config node via its `_target_`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.utils import get_method
from omegaconf import DictConfig, OmegaConf

from powerbench.hardware.hardware_profile import HardwareProfile
from powerbench.paths import repo_root


def plain_node(cfg: Any) -> DictConfig:
    """A DictConfig from a node, dict or schema instance, without a raw yaml's
    `defaults:` list (Hydra-composed nodes have none and are returned as they are)."""
    if isinstance(cfg, DictConfig):
        node = cfg
    elif isinstance(cfg, dict):
        node = OmegaConf.create(cfg)
    else:  # a schema dataclass instance
        node = OmegaConf.structured(cfg)
    if "defaults" in node:
        node = OmegaConf.create({k: v for k, v in node.items() if k != "defaults"})
    return node


def conf_node(group: str, name: str, conf_dir: str | Path | None = None) -> DictConfig:
    """`conf/<group>/<name>.yaml` without Hydra (its `defaults:` list dropped; the loaders
    validate against the schema themselves)."""
    root = Path(conf_dir) if conf_dir is not None else (repo_root() or Path.cwd()) / "conf"
    path = root / group / f"{name}.yaml"
    if not path.exists():
        options = sorted(p.stem for p in (root / group).glob("*.yaml"))
        raise FileNotFoundError(f"no {group} config {name!r} in {root / group}; "
                                f"options: {options}")
    return plain_node(OmegaConf.load(path))


def hardware_config(name: str, conf_dir: str | Path | None = None) -> DictConfig:
    return conf_node("hardware", name, conf_dir)


def load_hardware(cfg: HardwareProfile | DictConfig | dict | str | Any) -> HardwareProfile:
    """Call the node's `_target_` (static yaml -> `static.from_config`, `local` ->
    `local.load_local`) with the node itself. A HardwareProfile passes through; a string
    names a conf/hardware yaml."""
    if isinstance(cfg, HardwareProfile):
        return cfg
    node = hardware_config(cfg) if isinstance(cfg, str) else plain_node(cfg)
    target = node.get("_target_")
    if not target:
        raise ValueError("hardware config has no `_target_`")
    profile = get_method(target)(node)
    if not isinstance(profile, HardwareProfile):
        raise TypeError(f"{target} returned {type(profile).__name__}, not a HardwareProfile")
    return profile
