"""run_engine: composed conf/engine nodes, both engines, the FFN plug-in seam."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from powerbench.config.schema import BenchConfig
from powerbench.engine import DenseFFN, EngineResult, run_engine
from powerbench.engine.config import DecoderEngineConfig, FFNConfig
from powerbench.engine.timing import METRIC_NAMES

from .conftest import engine_configs, loaded_model

CONF = str(Path(__file__).resolve().parents[2] / "conf")
PROMPTS = [
    "prefill processes the whole prompt and decode produces one token at a time " * 3,
    "a neuron that rarely fires can stay on the cpu while hot neurons live on the gpu " * 3,
]
BENCH = BenchConfig(prompt_tokens=16, new_tokens=6, batch_size=2, warmup=1, repeats=2,
                    threads=1, greedy=True)


@pytest.fixture(scope="module")
def engine_cfgs():
    return engine_configs("dense", "hf_generate")


@pytest.fixture(scope="module")
def results(engine_cfgs, models, tokenizer) -> dict[str, EngineResult]:
    loaded = loaded_model("tiny_opt", models["opt"], tokenizer)
    return {name: run_engine(cfg, loaded, PROMPTS, BENCH) for name, cfg in engine_cfgs.items()}


@pytest.mark.parametrize("name", ["dense", "hf_generate"])
def test_engine_reports_positive_throughput(results, name):
    r = results[name]
    assert r.engine == name and r.threads == 1 and r.dtype == "fp32" and r.device == "cpu"
    assert set(METRIC_NAMES) <= set(r.metrics)
    for key in ("prefill_tokens_per_s", "decode_tokens_per_s", "decode_latency_ms_p50"):
        assert r.metrics[key] > 0, key
    assert r.metrics["decode_latency_ms_p90"] >= r.metrics["decode_latency_ms_p50"]
    assert len(r.runs) == BENCH.repeats and all(len(t.step_s) == 5 for t in r.runs)
    assert (r.batch_size, r.prompt_tokens, r.new_tokens) == (2, 16, 6)
    assert len(r.token_ids) == 2 and all(len(row) == 6 for row in r.token_ids)
    assert len(r.texts) == 2


def test_dense_engine_and_hf_generate_produce_the_same_greedy_tokens(results):
    assert results["dense"].token_ids == results["hf_generate"].token_ids


def test_threads_are_set_for_the_run_and_restored():
    from powerbench.threads import torch_threads

    before = torch.get_num_threads()
    target = 1 if before != 1 else 2
    with torch_threads(target) as n:
        assert n == target == torch.get_num_threads()
    assert torch.get_num_threads() == before
    with torch_threads(0) as n:  # 0: leave torch's default
        assert n == before


class CountingFFN:
    """A stand-in for a sparse FFN: a parameter from the config, an object from context."""

    def __init__(self, weights, scale: float, tally: dict) -> None:
        self.inner = DenseFFN(weights)
        self.scale = scale
        self.tally = tally

    def __call__(self, layer_idx, x, observer=None):
        self.tally[layer_idx] = self.tally.get(layer_idx, 0) + x.shape[0]
        return self.inner(layer_idx, x, observer) * self.scale

    def metrics(self) -> dict[str, float]:
        return {"ffn_calls": float(sum(self.tally.values()))}


@dataclass
class CountingFFNConfig(FFNConfig):
    _target_: Any = CountingFFN
    scale: float = 1.0


def test_a_new_ffn_plugs_in_through_config_and_context(models, tokenizer):
    loaded = loaded_model("tiny_opt", models["opt"], tokenizer)
    bench = BenchConfig(prompt_tokens=8, new_tokens=3, batch_size=1, warmup=0, repeats=1)
    cfg = DecoderEngineConfig(name="counting", ffn=CountingFFNConfig(scale=1.0))
    tally: dict[int, int] = {}
    r = run_engine(cfg, loaded, PROMPTS, bench, tally=tally, unrelated="ignored")
    # per layer: 8 prompt tokens + 2 decode steps of 1 token
    assert tally == {0: 10, 1: 10} and r.metrics["ffn_calls"] == 20.0
    with pytest.raises(TypeError):
        CountingFFNConfig(scael=1.0)
    cfg.ffn = {"_target_": CountingFFN, "scale": 1.0}  # untyped: refused, naming the fix
    with pytest.raises(TypeError, match="typed FFNConfig"):
        run_engine(cfg, loaded, PROMPTS, bench, tally={})


def test_sampling_engine_run_is_seeded(engine_cfgs, models, tokenizer):
    loaded = loaded_model("tiny_llama", models["llama_relu_gqa"], tokenizer)
    bench = BenchConfig(prompt_tokens=8, new_tokens=8, batch_size=2, warmup=0, repeats=1,
                        greedy=False)
    a = run_engine(engine_cfgs["dense"], loaded, PROMPTS, bench)
    b = run_engine(engine_cfgs["dense"], loaded, PROMPTS, bench)
    assert a.token_ids == b.token_ids


def test_too_few_new_tokens_is_rejected(engine_cfgs, models, tokenizer):
    loaded = loaded_model("tiny_opt", models["opt"], tokenizer)
    with pytest.raises(ValueError, match="new_tokens"):
        run_engine(engine_cfgs["dense"], loaded, PROMPTS, BenchConfig(new_tokens=1))
