"""engine=flash: conf/engine/flash.yaml composes, and run_engine drives FlashFFN through it
with the oracle predictors, giving the dense engine's greedy tokens."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from powerbench.config.schema import BenchConfig
from powerbench.engine import run_engine
from powerbench.predictor import OraclePredictorSet
from tests.engine.conftest import engine_configs, loaded_model, make_opt, tokenizer  # noqa: F401 (fixture)
from tests.flash.test_flash_ffn import FakeProfile

CONF = str(Path(__file__).resolve().parents[2] / "conf")
PROMPTS = ["a neuron that rarely fires can stay in flash while hot neurons stay in dram " * 2]
BENCH = BenchConfig(prompt_tokens=12, new_tokens=5, batch_size=1, warmup=1, repeats=2,
                    threads=1, greedy=True)


@pytest.fixture(scope="module")
def engine_cfgs():
    return engine_configs("dense", "flash")


def test_flash_engine_runs_from_config(engine_cfgs, tokenizer, tmp_path):  # noqa: F811
    model = make_opt(tokenizer, d_ffn=256)
    loaded = loaded_model("tiny_opt", model, tokenizer)
    cfg = copy.deepcopy(engine_cfgs["flash"])
    ffn = cfg.ffn
    assert ffn._target_ == "powerbench.flash.ffn.FlashFFN"
    assert ffn.dram_budget_fraction == 0.5 and ffn.bundled and ffn.pipeline
    ffn.cache_dir = str(tmp_path)
    ffn.dram_budget_fraction = 0.25
    oracle = OraclePredictorSet.from_hf(model, loaded.spec)
    profile = FakeProfile(loaded.spec.n_layers, loaded.spec.neurons_per_layer)
    flash = run_engine(cfg, loaded, PROMPTS, BENCH, predictors=oracle, profile=profile)
    dense = run_engine(engine_cfgs["dense"], loaded, PROMPTS, BENCH)
    assert flash.token_ids == dense.token_ids
    m = flash.metrics
    assert m["decode_tokens_per_s"] > 0
    assert m["flash_direct_io"] == 1.0 and m["flash_budget_gb"] > 0
    assert 0 < m["flash_hit_rate"] <= 1 and m["oracle_replayed_share"] > 0
    assert list(tmp_path.glob("relu-*.pbflash"))
