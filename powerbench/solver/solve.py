"""`solve(cfg, spec, profile, hardware)`: a Placement from a solver config via `_target_`."""

from __future__ import annotations

import os

import numpy as np

from powerbench.build import build
from powerbench.hardware.config import LocalHardwareConfig, StaticHardwareConfig
from powerbench.hardware.hardware_profile import HardwareProfile
from powerbench.hardware.load import load_hardware
from powerbench.model.spec import ModelSpec, WeightDType
from powerbench.profiling.activation_profile import ActivationProfile
from powerbench.solver.config import SolverConfig
from powerbench.solver.placement import Placement
from powerbench.solver.problem import PlacementProblem


def solve(solver_cfg: SolverConfig, spec: ModelSpec, profile: ActivationProfile,
          hardware: HardwareProfile | StaticHardwareConfig | LocalHardwareConfig,
          weight_dtype: WeightDType | str = "fp16", context: int | None = None,
          predictor_bytes: np.ndarray | float | None = None,
          cache_dir: str | os.PathLike | None = None) -> Placement:
    """Place `spec`'s weights on `hardware` with the solver named by `solver_cfg._target_`
    (a typed solver config, e.g. `ILPConfig()` or `group_config("solver", "ilp")`).

    weight_dtype: storage dtype of the weights (the model config's `weight_dtype`).
    context: KV-cache tokens to reserve (None: the solver config's, else max_positions).
    predictor_bytes: per-layer (or one per-layer figure) measured predictor sizes; None
        lets the sparse solvers size them from `predictor_hidden`.
    cache_dir: where a `local` hardware config's measured profile is cached (the run's
        `cache_dir`; None: the default); unused for a HardwareProfile or a static profile.
    Raises PlacementInfeasibleError (budget, shortfall_bytes) when the model does not fit.
    """
    problem = PlacementProblem(
        spec=spec, profile=profile, hardware=load_hardware(hardware, cache_dir=cache_dir),
        weight_dtype=WeightDType(weight_dtype), context=context,
        predictor_bytes=None if predictor_bytes is None else np.asarray(predictor_bytes),
    )
    placement = build(solver_cfg, problem)
    if not isinstance(placement, Placement):
        raise TypeError(f"{solver_cfg._target_} returned {type(placement).__name__}, "
                        "not a Placement")
    return placement
