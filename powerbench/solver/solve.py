"""`solve(cfg, spec, profile, hardware)`: a Placement from a solver config via `_target_`."""

from __future__ import annotations

from typing import Any

import numpy as np
from hydra.utils import get_method
from omegaconf import DictConfig

from powerbench.hardware.hardware_profile import HardwareProfile
from powerbench.hardware.load import conf_node, load_hardware, plain_node
from powerbench.model.spec import ModelSpec, WeightDType
from powerbench.profiling.activation_profile import ActivationProfile
from powerbench.solver.placement import Placement
from powerbench.solver.problem import PlacementProblem


def solver_config(name: str, **overrides: Any) -> DictConfig:
    """`conf/solver/<name>.yaml` (without Hydra) with `overrides` applied."""
    node = conf_node("solver", name)
    for key, value in overrides.items():
        node[key] = value
    return node


def _node(cfg: Any) -> DictConfig:
    return solver_config(cfg) if isinstance(cfg, str) else plain_node(cfg)


def solve(solver_cfg: Any, spec: ModelSpec, profile: ActivationProfile,
          hardware: HardwareProfile | Any, weight_dtype: WeightDType | str = "fp16",
          context: int | None = None,
          predictor_bytes: np.ndarray | float | None = None) -> Placement:
    """Place `spec`'s weights on `hardware` with the solver named by `solver_cfg._target_`
    (a config node, a schema instance, or the name of a conf/solver yaml).

    weight_dtype: storage dtype of the weights (the model config's `weight_dtype`).
    context: KV-cache tokens to reserve (None: the solver config's, else max_positions).
    predictor_bytes: per-layer (or one per-layer figure) measured predictor sizes; None
        lets the sparse solvers size them from `predictor_hidden`.
    Raises PlacementInfeasibleError (budget, shortfall_bytes) when the model does not fit.
    """
    node = _node(solver_cfg)
    target = node.get("_target_")
    if not target:
        raise ValueError("solver config has no `_target_`")
    problem = PlacementProblem(
        spec=spec, profile=profile, hardware=load_hardware(hardware),
        weight_dtype=WeightDType(weight_dtype), context=context,
        predictor_bytes=None if predictor_bytes is None else np.asarray(predictor_bytes),
    )
    placement = get_method(target)(node, problem)
    if not isinstance(placement, Placement):
        raise TypeError(f"{target} returned {type(placement).__name__}, not a Placement")
    return placement
