"""Every hardware yaml validates against its schema and states the papers' hardware facts."""

from __future__ import annotations

import inspect
from dataclasses import replace
from pathlib import Path

import pytest
from hydra import compose
from hydra.errors import ConfigCompositionException

from powerbench.build import target_of
from powerbench.config import group_config, typed
from powerbench.hardware import HardwareProfile, load_hardware
from powerbench.hardware.static import from_config
from powerbench.paths import repo_root

CONF = str(repo_root() / "conf")
STATIC = sorted(p.stem for p in (Path(CONF) / "hardware").glob("*.yaml") if p.stem != "local")
GB = 1e9


pytestmark = pytest.mark.usefixtures("hydra_conf")


def test_the_issue_machines_exist():
    assert set(STATIC) >= {"pc_high", "pc_low", "a100", "oneplus12", "oneplus_ace2"}


@pytest.mark.parametrize("name", STATIC)
def test_yaml_validates_and_is_self_consistent(name):
    cfg = compose(config_name="config", overrides=[f"hardware={name}"])
    hw = load_hardware(typed(cfg).hardware)
    assert isinstance(hw, HardwareProfile) and hw.name == name and hw.source == "static"
    for tier in hw.memories.values():
        assert tier.capacity_bytes > 0 and 0 < tier.usable_bytes <= tier.capacity_bytes
        assert tier.effective_bw > 0
        assert tier.peak_bw is None or tier.effective_bw <= tier.peak_bw
    for unit in hw.units.values():
        assert hw.bandwidth(unit) <= hw.bandwidth(unit, effective=False)
        peak = max(p for p in (unit.peak_fp32_flops, unit.peak_fp16_flops, unit.peak_int8_ops,
                               0.0) if p is not None)
        assert peak > 0
        assert unit.effective_flops is None or unit.effective_flops <= peak
    assert hw.cpu.cores > 0 and hw.cpu.peak_fp32_flops > 0
    assert hw.has_accelerator and hw.gpu_bw > hw.cpu_bw  # the accelerator reads faster
    assert 0 < hw.sync_s < 1e-3 and 0 < hw.launch_s < 1e-3
    if hw.link is not None:
        for eff, peak in ((hw.link.h2d_effective_bw, hw.link.h2d_peak_bw),
                          (hw.link.d2h_effective_bw, hw.link.d2h_peak_bw)):
            assert 0 < eff <= peak
    # loading is deterministic: the same typed config gives the same profile
    assert load_hardware(group_config("hardware", name)) == hw
    assert HardwareProfile.from_dict(hw.to_dict()) == hw


@pytest.mark.parametrize("name", [*STATIC, "local"])
def test_every_loader_takes_the_runs_cache_dir_by_name(name):
    """`load_hardware` calls every profile's `_target_` as target(cfg, cache_dir=...): each
    names the argument (none swallows it unseen in **kwargs), so no profile is special."""
    params = inspect.signature(target_of(group_config("hardware", name))).parameters
    assert "cache_dir" in params
    assert params["cache_dir"].kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                        inspect.Parameter.KEYWORD_ONLY)


def test_design_section_3_facts():
    high, low = load_hardware(group_config("hardware", "pc_high")), load_hardware(group_config("hardware", "pc_low"))
    # the GPUs' "24 GB" / "11 GB" are binary (conf/hardware [GIB]): 24 / 11 GiB
    assert high.gpu.model.endswith("RTX 4090")
    assert high.memory_of(high.gpu).capacity_bytes == pytest.approx(24 * 2**30, rel=1e-5)
    assert high.bandwidth(high.gpu, effective=False) == 1008 * GB
    assert high.memory_of(high.cpu).capacity_bytes == 192 * GB
    assert high.bandwidth(high.cpu, effective=False) == pytest.approx(67.2 * GB)
    assert high.gpu.peak_fp16_flops == pytest.approx(330.3e12)  # FP16 accumulate
    assert high.link.h2d_peak_bw + high.link.d2h_peak_bw == pytest.approx(63 * GB)  # 64 raw
    assert [c.cores for c in high.cpu.clusters] == [8, 16]
    assert low.memory_of(low.gpu).capacity_bytes == pytest.approx(11 * 2**30, rel=1e-5)
    assert low.bandwidth(low.gpu, effective=False) == 616 * GB
    assert low.bandwidth(low.cpu, effective=False) == pytest.approx(38.4 * GB)
    assert low.memory_of(low.cpu).capacity_bytes == 64 * GB
    a100 = load_hardware(group_config("hardware", "a100"))
    assert a100.gpu.peak_fp16_flops == pytest.approx(312e12)
    assert a100.memory_of(a100.gpu).capacity_bytes == 80 * GB
    phone = load_hardware(group_config("hardware", "oneplus12"))
    assert phone.unified and phone.link is None and phone.gpu.kind == "npu"
    assert phone.cpu_capacity == pytest.approx(19 * GB)
    assert phone.cpu_bw == pytest.approx(43.9 * GB) and phone.gpu_bw == pytest.approx(56 * GB)
    assert [c.cores for c in phone.cpu.clusters] == [1, 5, 2]
    assert phone.memories["flash"].extra["rand_read_4k_128m_gb_s"] == 1.0
    ace2 = load_hardware(group_config("hardware", "oneplus_ace2"))
    assert ace2.cpu_capacity == pytest.approx(11 * GB) and ace2.unified


def test_unknown_key_and_bad_numbers_fail():
    with pytest.raises(ConfigCompositionException):  # unknown key
        compose(config_name="config",
                overrides=["hardware=pc_high", "hardware.memories.dram.capcity_gb=1"])
    with pytest.raises(ConfigCompositionException):
        compose(config_name="config", overrides=["hardware=pc_high", "hardware.sync_us=fast"])
    node = group_config("hardware", "pc_high")
    node.memories["vram"].effective_bw_gb_s = 2000
    with pytest.raises(ValueError, match="exceeds the peak"):
        from_config(node)
    node = group_config("hardware", "pc_high")
    node.units["gpu"].memory = "hbm"
    with pytest.raises(ValueError, match="not a tier"):
        from_config(node)
    hw = load_hardware(group_config("hardware", "pc_high"))
    with pytest.raises(ValueError, match="needs a `link`"):
        replace(hw, link=None)
