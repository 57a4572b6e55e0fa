"""Pipeline glue for `engine=simulate` (called from powerbench.pipeline).

    if is_simulated(cfg.engine):            # instead of the measured engine + evaluation
        try:
            placement = stage_placement(ctx, loaded, profile)
        except PlacementInfeasibleError as err:
            record_infeasible(ctx, err)     # logged as "does not fit", the run still finishes
        else:
            simulate_stage(ctx, loaded, profile, placement, predictors)

`ctx` is the pipeline's RunContext (cfg, out_dir, record(), artifact(), note(), tracker).
"""

from __future__ import annotations

from typing import Any

from powerbench.simulator.result import SimResult
from powerbench.simulator.simulate import simulate

SIM_ARTIFACT_DIR = "simulator"


def is_simulated(engine_cfg: Any) -> bool:
    """True for engine configs of the cost model (their schema sets `simulated: true`)."""
    if engine_cfg is None:
        return False
    getter = engine_cfg.get if hasattr(engine_cfg, "get") else (
        lambda key, default=None: getattr(engine_cfg, key, default))
    return bool(getter("simulated", False))


def hardware_node(cfg: Any) -> Any:
    """The hardware config as a plain dict (what `load_hardware` accepts everywhere)."""
    node = cfg.get("hardware") if hasattr(cfg, "get") else getattr(cfg, "hardware", None)
    if node is None:
        raise ValueError("engine=simulate needs a hardware profile: add hardware=<name> "
                         "(pc_high, pc_low, a100, oneplus12, local) and solver=<name>")
    if type(node).__module__.startswith("omegaconf"):
        from omegaconf import OmegaConf

        return OmegaConf.to_container(node, resolve=True)
    return node


def simulate_stage(ctx: Any, loaded: Any, profile: Any, placement: Any,
                   predictors: Any | None = None) -> SimResult:
    """Run the cost model, record its metrics, log its breakdown CSVs, tag the run."""
    from powerbench.hardware import load_hardware

    if placement is None:
        raise ValueError("engine=simulate needs a placement: add solver=<name> (ilp, greedy, "
                         "layer_offload, all_gpu, all_cpu) and hardware=<name>")
    hardware = load_hardware(hardware_node(ctx.cfg))
    result = simulate(ctx.cfg.engine, loaded.spec, profile, placement, hardware,
                      predictors=predictors, bench=ctx.cfg.bench)
    ctx.record({"sim_feasible": 1.0, **result.metrics})
    for path in result.write(ctx.out_dir / SIM_ARTIFACT_DIR):
        ctx.artifact(path, SIM_ARTIFACT_DIR)
    ctx.tracker.set_tags({"measured": "false", "sim_hardware": hardware.name,
                          "sim_mode": str(ctx.cfg.engine.mode)})
    for text in result.notes:
        ctx.note(text)
    return result


def record_infeasible(ctx: Any, error: Any) -> None:
    """A model that fits in no memory of the machine: log it, do not fail the sweep."""
    ctx.record({"sim_feasible": 0.0,
                "placement_shortfall_gb": float(getattr(error, "shortfall_bytes", 0.0)) / 1e9})
    ctx.tracker.set_tags({"measured": "false", "infeasible": str(error)[:5000]})
    ctx.note(f"placement infeasible, nothing simulated: {error}")
