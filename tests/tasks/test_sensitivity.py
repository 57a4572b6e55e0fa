"""`powerbench sensitivity`'s pieces: constant variants scale exactly the constant named
(efficiencies capped at 1), only on their hardware profile; row notes by label and value."""

from __future__ import annotations

import pytest

from powerbench.simulator.config import SimulatorConfig
from powerbench.tasks.sensitivity import _note, scale_hw, scale_sim
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
