"""Every range is checked when the configuration is composed (issue 28): a bad length,
batch, position or recall fails in the first second, naming the setting and the valid
range, before any model is trained, data read or profile measured."""

from __future__ import annotations

import time

import pytest

from powerbench.config import load_config
from powerbench.schema_helpers import ConfigRangeError, MissingSettingError

CASES = [
    (["bench.prompt_tokens=300"], r"bench\.prompt_tokens \+ bench\.new_tokens = 300 \+ 64 = "
     r"364 is out of range for model tiny_relu \(max_positions 256\); valid: "
     r"bench\.prompt_tokens \+ bench\.new_tokens <= 256"),
    (["bench.new_tokens=100000"], r"bench\.new_tokens = 64 \+ 100000 = 100064 .*<= 256"),
    (["eval.max_tokens=-5"], r"eval\.max_tokens=-5 is out of range; valid: 128 <= "
     r"eval\.max_tokens"),
    (["bench.batch_size=0"], r"bench\.batch_size=0 is out of range; valid: 1 <= "
     r"bench\.batch_size"),
    (["bench.new_tokens=0"], r"bench\.new_tokens=0 is out of range; valid: 1 <="),
    (["bench.prompt_tokens=-1"], r"bench\.prompt_tokens=-1 is out of range"),
    (["bench.repeats=0"], r"bench\.repeats=0 is out of range"),
    (["profiling.max_tokens=10"], r"profiling\.max_tokens=10 is out of range; valid: 128 <="),
    (["profiling.batch_size=0"], r"profiling\.batch_size=0 is out of range"),
    (["eval.mc_items=-1"], r"eval\.mc_items=-1 is out of range"),
    (["predictor=fixed", "predictor.target_recall=1.5"],
     r"predictor\.target_recall=1\.5 is out of range; valid: 0\.0 < predictor\.target_recall "
     r"<= 1\.0"),
    (["predictor=adaptive", "predictor.target_recall=0"], r"predictor\.target_recall=0"),
    # engine choices and ranges: named with the valid values before any stage runs
    (["engine=sparse_cpu", "engine.dense_kernel=nope"],
     r"engine\.dense_kernel='nope' is not an option; valid: auto, torch, sparse_cpu"),
    (["engine.dtype=fp8"], r"engine\.dtype='fp8' is not an option; valid: fp32, fp16, bf16"),
    (["engine=sparse_cpu", "engine.ffn.backend=nope"],
     r"engine\.ffn\.backend='nope' is not an option; valid: sparse_torch, sparse_cpu, "
     r"sparse_cuda"),
    (["engine=sparse_cpu", "engine.ffn.dense_from_rows=0"], r"engine\.ffn\.dense_from_rows=0"),
    (["engine.top_p=2"], r"engine\.top_p=2\.0 is out of range; valid: 0\.0 < engine\.top_p <= "
     r"1\.0"),
    (["engine.top_k=-1"], r"engine\.top_k=-1 is out of range"),
    (["engine.dense_kernel_max_rows=-1"], r"engine\.dense_kernel_max_rows=-1 is out of range"),
    (["engine=hybrid", "engine.ffn.active=nope"],
     r"engine\.ffn\.active='nope' is not an option; valid: auto, predictor, oracle, dense"),
    (["engine=hybrid", "engine.ffn.cpu_backend=cpu"], r"engine\.ffn\.cpu_backend='cpu'"),
    (["engine=hybrid", "engine.ffn.cpu_part=thread"],
     r"engine\.ffn\.cpu_part='thread' is not an option; valid: worker, inline"),
    (["engine=hybrid", "engine.ffn.cpu_threads=0"],
     r"engine\.ffn\.cpu_threads='0': valid: auto \(measured\) or a thread count >= 1"),
    # contradictory engine settings: named with what to use instead, before any stage runs
    (["engine=sparse_cpu", "predictor=none"],
     r"engine=sparse_cpu computes the neurons a predictor chooses and predictor=none chooses "
     r"none: add predictor=fixed, adaptive or oracle \(the dense baseline is engine=dense\)"),
    (["engine=sparse_torch"], r"engine=sparse_torch computes the neurons a predictor chooses"),
    (["engine=flash"], r"engine=flash computes the neurons a predictor chooses"),
    (["engine.device=gpu"], r"engine\.device='gpu' is not a device; valid: cpu, cuda, "
     r"cuda:<index> \(a GPU is engine\.device=cuda"),
    (["engine=sparse_cpu", "predictor=fixed", "engine.device=cuda"],
     r"engine\.device='cuda': engine\.ffn\.backend=sparse_cpu \(engine=sparse_cpu\) computes "
     r"the FFN on the CPU; valid: engine\.device=cpu or unset \(on a GPU: engine=sparse_cuda "
     r"engine\.device=cuda\)"),
    (["engine=hybrid", "engine.device=cpu"],
     r"engine\.device='cpu': engine=hybrid runs attention and the hot neurons on the GPU; "
     r"valid: engine\.device=cuda"),
]


@pytest.mark.parametrize(("overrides", "message"), CASES,
                         ids=[" ".join(o) for o, _ in CASES])
def test_out_of_range_setting_fails_at_composition_naming_setting_and_range(overrides,
                                                                            message):
    start = time.perf_counter()
    with pytest.raises(ConfigRangeError, match=message):
        load_config(overrides)
    assert time.perf_counter() - start < 5


def test_positions_are_not_checked_without_a_measured_engine():
    cfg = load_config(["model=opt_13b", "~engine", "bench.new_tokens=100000"])
    assert cfg.bench.new_tokens == 100000  # a simulated long decode is a valid question


def test_bad_range_through_the_cli_fails_before_any_stage(run_cli, capsys, monkeypatch):
    import powerbench.pipeline as pipeline

    started = []
    monkeypatch.setattr(pipeline, "run_stages", lambda ctx: started.append(ctx))
    with pytest.raises(SystemExit):
        run_cli(["eval.max_tokens=-5"])
    assert not started
    assert "eval.max_tokens=-5 is out of range" in capsys.readouterr().err


@pytest.mark.parametrize("overrides", [["engine.device=cuda"], ["engine.device=cuda:0"],
                                       ["engine=sparse_cuda", "predictor=oracle",
                                        "engine.device=cuda"]])
def test_a_cuda_device_on_a_machine_without_one_fails_at_composition(overrides, monkeypatch):
    """The same config is valid where torch sees a GPU: the check is of the machine that
    types it (the job's), not of the composition alone."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigRangeError, match=r"engine\.device='cuda(:0)?': this machine "
                       r"has no CUDA device .*use engine\.device=cpu"):
        load_config(overrides)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert load_config(overrides).engine.device.startswith("cuda")


def test_engine_hybrid_without_cuda_fails_at_composition_saying_what_runs_instead(
        monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigRangeError, match=r"engine=hybrid .* no CUDA device.*"
                       r"simulator=cost_model"):
        load_config(["engine=hybrid"])


@pytest.mark.parametrize("backend", ["sparse_cpu", "sparse_torch", "sparse_cuda"])
def test_engine_flash_on_a_gpu_fails_at_composition(backend, monkeypatch):
    """FlashFFN computes on the CPU from its DRAM cache, whichever kernels it uses: a CUDA
    device is refused when the config is composed, even where torch sees a GPU."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(ConfigRangeError, match=r"engine\.device='cuda': engine=flash .* on "
                       r"the CPU; valid: engine\.device=cpu or unset"):
        load_config(["engine=flash", "predictor=fixed", "engine.device=cuda",
                     f"engine.ffn.backend={backend}"])
    assert load_config(["engine=flash", "predictor=fixed", "engine.device=cpu",
                        f"engine.ffn.backend={backend}"]).engine.device == "cpu"


@pytest.mark.parametrize(("overrides", "missing"), [
    (["engine=hybrid", "predictor=fixed"], r"add hardware=<name> \(.*\) and solver=<name> \("),
    (["engine=hybrid", "predictor=fixed", "hardware=pc_high"], r"add solver=<name> \("),
    (["engine=hybrid", "predictor=fixed", "solver=ilp", "simulator=cost_model"],
     r"add hardware=<name> \("),
])
def test_engine_hybrid_without_a_placement_fails_at_composition(overrides, missing,
                                                                monkeypatch):
    """On a GPU machine (CUDA faked present) engine=hybrid, whose GPU neurons are a
    placement's, needs solver and hardware: said when the config is composed, beside a
    simulator that needs the same."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    needers = "simulator=cost_model and engine=hybrid need" if "simulator=cost_model" in \
        overrides else "engine=hybrid needs"
    with pytest.raises(MissingSettingError, match=f"^{needers} a placement: {missing}"):
        load_config(overrides)
    cfg = load_config([*overrides, "hardware=pc_high", "solver=ilp"])
    assert cfg.engine.name == "hybrid" and cfg.solver is not None


def test_a_sparse_engine_without_a_predictor_stops_before_any_stage(run_cli, capsys,
                                                                   monkeypatch):
    import powerbench.pipeline as pipeline

    started = []
    monkeypatch.setattr(pipeline, "run_stages", lambda ctx: started.append(ctx))
    with pytest.raises(SystemExit):
        run_cli(["engine=sparse_cpu", "predictor=none"])
    assert not started
    assert "add predictor=fixed, adaptive or oracle" in capsys.readouterr().err
