"""Cost-model simulator: simulated tokens/s, time breakdown and neuron-load split for any
hardware profile, from the same activation data, predictors and placement the real
engines use (docs/architecture.md, `simulator=cost_model`)."""

from powerbench.simulator.config import (
    ComputeMode,
    OpCounts,
    PrefillConfig,
    PrefillMode,
    SimulatorConfig,
)
from powerbench.simulator.cost import CostModel, PassCosts, PassShape
from powerbench.simulator.result import SimResult
from powerbench.simulator.simulate import simulate
from powerbench.simulator.workload import FFNWork, ffn_work

__all__ = [
    "ComputeMode",
    "CostModel",
    "FFNWork",
    "OpCounts",
    "PassCosts",
    "PassShape",
    "PrefillConfig",
    "PrefillMode",
    "SimResult",
    "SimulatorConfig",
    "ffn_work",
    "simulate",
]
