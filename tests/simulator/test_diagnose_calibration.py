"""experiments/diagnose_calibration.py: its structural what-ifs patch the cost model only
inside `variant(...)` and change what their docstrings say (hand-made toy hardware)."""

from __future__ import annotations

import runpy

import numpy as np
import pytest

from powerbench.paths import repo_root
from powerbench.simulator import ComputeMode
from powerbench.simulator.cost import CostModel, PassShape
from powerbench.simulator.rates import DeviceRates

from .factories import GB, make_hardware, make_placement, make_spec, zero_overhead_config


@pytest.fixture(scope="module")
def script() -> dict:
    return runpy.run_path(str(repo_root() / "experiments" / "diagnose_calibration.py"))


def test_variant_patches_only_inside_and_restores(script):
    time, attention = DeviceRates.time, CostModel.attention
    with script["variant"]("additive_launch"):
        assert DeviceRates.time is not time
    with script["variant"]("kv_on_host"):
        assert CostModel.attention is not attention
    with script["variant"]("base"):
        pass
    assert DeviceRates.time is time and CostModel.attention is attention


def test_additive_launch_adds_kernels_to_the_roofline(script):
    gpu = DeviceRates("gpu", bandwidth=100 * GB, flops=1e30, op_s=4e-6, overlapped_ops=True)
    roof = 1 * GB / (100 * GB)
    assert gpu.time(1 * GB, 0.0, 10) == pytest.approx(roof)  # max(roof, 40 us)
    with script["variant"]("additive_launch"):
        assert gpu.time(1 * GB, 0.0, 10) == pytest.approx(roof + 40e-6)


def test_kv_on_host_moves_the_kv_cache_to_the_cpu_in_sparse_mode_only(script):
    spec = make_spec(n_layers=1, d_model=64)
    hw = make_hardware(cpu_bw=10 * GB, gpu_bw=100 * GB, link_bw=1 * GB, sync_s=10e-6)
    placement = make_placement(spec, [np.arange(10)])
    shape = PassShape.decode(np.array([1000.0]), 1)
    for mode in (ComputeMode.sparse, ComputeMode.dense):
        model = CostModel(spec, placement, hw, zero_overhead_config(mode=mode))
        before = model.attention(0, shape)
        with script["variant"]("kv_on_host"):
            after = model.attention(0, shape)
        if mode is ComputeMode.dense:
            assert after == pytest.approx(before)
            continue
        kv = 1000 * model.kv_token_bytes
        moves = 2 * 10e-6 + 4 * model.x_bytes / (1 * GB)
        expected = model.attn_bytes / (100 * GB) + kv / (10 * GB) + moves
        assert after == pytest.approx(expected)
        assert after > before
