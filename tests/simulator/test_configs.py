"""simulator=cost_model / engine=hybrid and the e2e experiments compose against their schemas."""

from __future__ import annotations

import pytest
from hydra import compose
from hydra.errors import ConfigCompositionException

from powerbench.config import typed
from powerbench.simulator.config import ComputeMode, PrefillMode, SimulatorConfig

pytestmark = pytest.mark.usefixtures("hydra_conf")


def test_simulator_node_becomes_a_typed_config():
    cfg = compose("config", overrides=["simulator=cost_model", "simulator.mode=dense",
                                       "simulator.prefill.mode=hybrid", "hardware=pc_high",
                                       "solver=greedy"])
    sim = typed(cfg).simulator
    assert isinstance(sim, SimulatorConfig)
    assert sim.mode is ComputeMode.dense and sim.prefill.mode is PrefillMode.hybrid
    assert typed(compose("config", overrides=["engine=dense"])).simulator is None


def test_simulator_typos_fail():
    with pytest.raises(ConfigCompositionException):
        compose("config", overrides=["simulator=cost_model", "simulator.mdoe=dense"])
    with pytest.raises(TypeError, match="mdoe"):
        SimulatorConfig(mdoe="dense")


@pytest.mark.parametrize(("experiment", "hardware", "dtype", "longest"),
                         [("fig10", "pc_high", "fp16", 128 + 512), ("fig11", "pc_low", "fp16", 128 + 512),
                          ("fig12", "pc_high", "fp16", 64 + 128), ("fig13", "pc_high", "int4", 64 + 512)])
@pytest.mark.parametrize(("system", "solver", "mode"), [("powerinfer", "ilp", "sparse"),
                                                        ("llamacpp", "layer_offload", "dense")])
def test_e2e_experiments_pair_solver_and_compute(experiment, hardware, dtype, longest, system,
                                                 solver, mode):
    cfg = compose("config", overrides=[f"experiment={experiment}",
                                       f"experiment/system={system}"],
                  return_hydra_config=True)
    assert cfg.hardware.name == hardware and cfg.simulator.name == "cost_model"
    assert cfg.engine is None and cfg.model.weight_dtype == dtype
    assert cfg.solver.name == solver and cfg.simulator.mode == mode
    params = cfg.hydra.sweeper.params
    prompts = [int(p) for p in str(params.get("bench.prompt_tokens", cfg.bench.prompt_tokens)
                                   ).split(",")]
    outputs = [int(n) for n in str(params.get("bench.new_tokens", cfg.bench.new_tokens)
                                   ).split(",")]
    assert cfg.solver.context == max(prompts) + max(outputs) == longest
    assert params["experiment/system"] == "powerinfer,llamacpp"


def test_paper_models_are_swept():
    def swept(experiment):
        cfg = compose("config", overrides=[f"experiment={experiment}"], return_hydra_config=True)
        return cfg.hydra.sweeper.params

    assert set(swept("fig10")["model"].split(",")) == {
        "opt_30b", "opt_66b", "falcon_relu_40b", "llama_reglu_70b"}
    assert swept("fig10")["bench.new_tokens"] == "8,128,512"
    assert swept("fig10")["bench.prompt_tokens"] == "64,128"
    assert set(swept("fig11")["model"].split(",")) == {
        "opt_13b", "opt_30b", "llama_reglu_13b", "bamboo_7b"}
    assert set(swept("fig13")["model"].split(",")) == {  # PC-High's set (the paper's Fig. 13)
        "opt_66b", "falcon_relu_40b", "llama_reglu_70b", "opt_175b"}


def test_hybrid_engine_composes():
    cfg = compose("config", overrides=["engine=hybrid"])
    assert cfg.engine._target_ == "powerbench.engine.hybrid.HybridEngine"
    assert cfg.engine.device == "cuda" and cfg.engine.ffn.active == "auto"
