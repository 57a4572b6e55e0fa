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
                                       "simulator.prefill.mode=hybrid"])
    sim = typed(cfg).simulator
    assert isinstance(sim, SimulatorConfig)
    assert sim.mode is ComputeMode.dense and sim.prefill.mode is PrefillMode.hybrid
    assert typed(compose("config", overrides=["engine=dense"])).simulator is None


def test_simulator_typos_fail():
    with pytest.raises(ConfigCompositionException):
        compose("config", overrides=["simulator=cost_model", "simulator.mdoe=dense"])
    with pytest.raises(TypeError, match="mdoe"):
        SimulatorConfig(mdoe="dense")


@pytest.mark.parametrize(("experiment", "hardware"), [("pc_high_e2e", "pc_high"),
                                                      ("pc_low_e2e", "pc_low")])
@pytest.mark.parametrize(("system", "solver", "mode"), [("powerinfer", "ilp", "sparse"),
                                                        ("llamacpp", "layer_offload", "dense")])
def test_e2e_experiments_pair_solver_and_compute(experiment, hardware, system, solver, mode):
    cfg = compose("config", overrides=[f"experiment={experiment}",
                                       f"experiment/system={system}"],
                  return_hydra_config=True)
    assert cfg.hardware.name == hardware and cfg.simulator.name == "cost_model"
    assert cfg.engine is None
    assert cfg.solver.name == solver and cfg.simulator.mode == mode
    assert cfg.solver.context == cfg.bench.prompt_tokens + 512
    params = cfg.hydra.sweeper.params
    assert params["bench.new_tokens"] == "8,128,512"
    assert params["model.weight_dtype"] == "fp16,int4"
    assert params["experiment/system"] == "powerinfer,llamacpp"


def test_paper_models_are_swept():
    cfg = compose("config", overrides=["experiment=pc_high_e2e"], return_hydra_config=True)
    assert set(cfg.hydra.sweeper.params["model"].split(",")) == {
        "opt_30b", "opt_66b", "opt_175b", "falcon_relu_40b", "llama_reglu_70b"}
    cfg = compose("config", overrides=["experiment=pc_low_e2e"], return_hydra_config=True)
    assert set(cfg.hydra.sweeper.params["model"].split(",")) == {
        "opt_13b", "opt_30b", "llama_reglu_13b", "bamboo_7b"}


def test_hybrid_engine_composes():
    cfg = compose("config", overrides=["engine=hybrid"])
    assert cfg.engine._target_ == "powerbench.engine.hybrid.HybridEngine"
    assert cfg.engine.device == "cuda" and cfg.engine.ffn.active == "auto"
