"""Pipeline glue for `simulator=cost_model` (called from powerbench.pipeline).

    placement = stage_placement(ctx, ...)    # PlacementInfeasibleError -> record_infeasible
    simulate_stage(ctx, loaded, profile, placement, hardware, predictors)

`ctx` is the pipeline's RunContext (cfg, out_dir, record(), artifact(), note(), tracker).
"""

from __future__ import annotations

from typing import Any

from powerbench.build import build
from powerbench.simulator.result import SimResult

SIM_ARTIFACT_DIR = "simulator"


def simulate_stage(ctx: Any, loaded: Any, profile: Any, placement: Any, hardware: Any,
                   predictors: Any | None = None) -> SimResult:
    """Run the cost model, record its metrics, log its breakdown CSVs, tag the run."""
    cfg = ctx.cfg.simulator
    result = build(cfg, loaded.spec, profile, placement, hardware, predictors=predictors,
                   bench=ctx.cfg.bench)
    ctx.record({"sim_feasible": 1.0, **result.metrics})
    for path in result.write(ctx.out_dir / SIM_ARTIFACT_DIR):
        ctx.artifact(path, SIM_ARTIFACT_DIR)
    ctx.tracker.set_tags({"simulated": "true", "sim_hardware": hardware.name,
                          "sim_mode": str(cfg.mode)})
    for text in result.notes:
        ctx.note(text)
    return result


def record_infeasible(ctx: Any, error: Any) -> None:
    """A model that fits in no memory of the machine: log it, do not fail the sweep."""
    ctx.record({"sim_feasible": 0.0,
                "placement_shortfall_gb": float(getattr(error, "shortfall_bytes", 0.0)) / 1e9})
    ctx.tracker.set_tags({"simulated": "true", "infeasible": str(error)[:5000]})
    ctx.note(f"placement infeasible, nothing simulated: {error}")
