"""Neuron placement: which FFN neurons and dense parts live on the GPU (PowerInfer paper, §6).

Solvers (conf/solver, `_target_`): `ilp` (the paper's integer program), `greedy`
(PowerInfer's released top-k), `layer_offload` (llama.cpp -ngl), `all_gpu`, `all_cpu`.
"""

from powerbench.solver.placement import (
    CPU,
    GPU,
    DeviceBytes,
    Placement,
    PlacementInfeasibleError,
    SolverStats,
)
from powerbench.solver.problem import PlacementProblem
from powerbench.solver.report import log_placement, plot_split, summary, write_artifacts
from powerbench.solver.solve import solve

__all__ = [
    "CPU",
    "GPU",
    "DeviceBytes",
    "Placement",
    "PlacementInfeasibleError",
    "PlacementProblem",
    "SolverStats",
    "log_placement",
    "plot_split",
    "solve",
    "summary",
    "write_artifacts",
]
