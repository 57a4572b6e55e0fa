"""The issue's scale target: OPT-175B (96 x 49152 neurons, grouped) to <= 1% gap in about
30 s on two cores (PowerInfer's released solver gives GLPK 30 s). Slow: ~10-40 s."""

from __future__ import annotations

import pytest

from powerbench.config import group_config
from powerbench.model.loading import spec_from_config
from powerbench.profiling.synthetic import synthetic_profile
from powerbench.solver import solve


@pytest.mark.slow
@pytest.mark.parametrize("communication", ["dense", "expected"])
def test_opt_175b_to_one_percent_within_time_limit(communication):
    spec = spec_from_config(group_config("model", "opt_175b"))
    profile = synthetic_profile(spec, trace_tokens=8)
    cfg = group_config("solver", "ilp", communication=communication, dense_gpu_share=0.5,
                        time_limit_s=30.0, mip_gap=0.01)
    placement = solve(cfg, spec, profile, group_config("hardware", "pc_high"), weight_dtype="int4")
    stats = placement.stats
    assert stats.extra["n_binaries"] > 30_000
    assert stats.gap is not None and stats.gap <= 0.01
    assert stats.extra["bound_gap"] <= 0.01  # certified at neuron level too
    assert stats.extra["backend_time_s"] <= 31.0
    assert stats.solve_time_s < 45.0  # backend + model building + refinement, loaded machine
    assert placement.cl_violations == 0
    greedy = solve(group_config("solver", "greedy", communication=communication, dense_gpu_share=0.5),
                   spec, profile, group_config("hardware", "pc_high"), weight_dtype="int4")
    if greedy.cl_violations == 0:
        assert stats.objective >= greedy.stats.objective - 1e-9
