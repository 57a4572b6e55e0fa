"""`powerbench sensitivity`'s pieces: constant variants scale exactly the constant named
(efficiencies capped at 1), only on their hardware profile; row notes by label and value."""

from __future__ import annotations

import pytest

from powerbench.simulator.config import (
    ComputeMode,
    PrefillConfig,
    PrefillMode,
    SimulatorConfig,
    TokenOverlapConfig,
)
from powerbench.tasks.config import SensitivityTask
from powerbench.tasks.sensitivity import (
    _note,
    previous_factors,
    prompt_read_as,
    scale_hw,
    scale_overlap,
    scale_sim,
)
from tests.simulator.factories import GB, make_hardware


def test_scale_sim_nested_and_capped():
    sim = SimulatorConfig()
    scaled, hw = scale_sim("efficiency.gpu_dense", 0.5)(sim, make_hardware())
    assert scaled.efficiency.gpu_dense == pytest.approx(0.5 * sim.efficiency.gpu_dense)
    assert scaled.efficiency.int4 == sim.efficiency.int4
    capped, _ = scale_sim("efficiency.cpu_dense", 1.2, cap=1.0)(sim, hw)
    assert capped.efficiency.cpu_dense == 1.0
    top, _ = scale_sim("host_layer_us", 2.0)(SimulatorConfig(host_layer_us=100.0), hw)
    assert top.host_layer_us == 200.0


def test_overlap_variants_scale_every_point_and_previous_drops_it():
    sim = SimulatorConfig(token_overlap=TokenOverlapConfig([0.03, 0.5], [0.2, 0.1]))
    up, _ = scale_overlap(1.2)(sim, make_hardware())
    assert up.token_overlap.rho == pytest.approx([0.24, 0.12])
    assert up.token_overlap.active_fraction == [0.03, 0.5]
    before, _ = previous_factors({"gpu_dense": 0.4, "token_overlap": 0.0})(sim, make_hardware())
    assert before.token_overlap.rho == [] and before.efficiency.gpu_dense == 0.4
    kept, _ = previous_factors({"gpu_dense": 0.4})(sim, make_hardware())
    assert kept.token_overlap == sim.token_overlap


def test_scale_hw_only_on_its_profile():
    hw = make_hardware(cpu_bw=10 * GB, link_bw=2 * GB, sync_s=10e-6)
    _, same = scale_hw("other", "dram", 2.0)(SimulatorConfig(), hw)
    assert same is hw
    _, dram = scale_hw("test", "dram", 2.0)(SimulatorConfig(), hw)
    assert dram.memories["dram"].effective_bw == 20 * GB and dram.gpu_bw == hw.gpu_bw
    _, link = scale_hw("test", "link", 0.5)(SimulatorConfig(), hw)
    assert link.link.h2d_effective_bw == 1 * GB and link.link.d2h_effective_bw == 1 * GB
    _, sync = scale_hw("test", "sync", 3.0)(SimulatorConfig(), hw)
    assert sync.sync_s == pytest.approx(30e-6)


def test_notes_match_label_prefix_and_value():
    notes = {"average speedup @ 4.71": "pc-low", "average speedup @ 7.23": "pc-high"}
    assert _note(notes, "average speedup over llama.cpp", 4.71, within=False) == "pc-low"
    assert _note(notes, "average speedup over llama.cpp", 7.23, within=True) == ""
    assert _note(notes, "something else", 1.0, within=False).startswith("not diagnosed")


def test_prompt_alternative_recosts_only_prompts_through_the_sparse_operators():
    public = prompt_read_as(PrefillMode.powerinfer_public)
    hw = make_hardware()
    sparse = SimulatorConfig(mode=ComputeMode.sparse,
                             prefill=PrefillConfig(mode=PrefillMode.hybrid, gpu_min_tokens=16))
    moved, same_hw = public(sparse, hw)
    assert moved.prefill.mode is PrefillMode.powerinfer_public and same_hw is hw
    assert moved.prefill.gpu_min_tokens == 16  # the rest of the prefill block kept
    for kept in (SimulatorConfig(mode=ComputeMode.dense,  # llama.cpp: its own prompt path
                                 prefill=PrefillConfig(mode=PrefillMode.hybrid)),
                 SimulatorConfig(mode=ComputeMode.sparse,  # +PO: llama.cpp's dense prompt
                                 prefill=PrefillConfig(mode=PrefillMode.gpu_stream))):
        assert public(kept, hw)[0] is kept


def test_unknown_alternative_prefill_names_the_valid_modes():
    task = SensitivityTask(alternative_prefill="powerinfer_public")
    assert PrefillMode(task.alternative_prefill) is PrefillMode.powerinfer_public
    assert SensitivityTask(alternative_prefill=None).alternative_prefill is None  # no column
    with pytest.raises(ValueError, match="valid: gpu_stream, hybrid, dense, powerinfer_public"):
        SensitivityTask(alternative_prefill="public")  # fails at composition
