"""Synthetic-weights decoders (engine.synthetic) and `bench-decode
model@task.synthetic_model=...`."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from powerbench.config import group_config
from powerbench.engine.decoder import Decoder
from powerbench.engine.sparse import SparseFFN
from powerbench.engine.synthetic import (
    AllActive,
    TraceReplay,
    synthetic_decoder_weights,
    synthetic_spec,
    trace_profile,
)
from powerbench.measure.decode_bench import build_synthetic_engines, run_decode_bench

TINY = ["spec.d_model=64", "spec.d_ffn=256", "spec.n_heads=4", "spec.n_kv_heads=4",
        "spec.vocab_size=300", "spec.max_positions=64"]


@pytest.fixture(scope="module", params=["opt_6_7b", "llama_reglu_7b"])
def tiny(request):
    spec = synthetic_spec(group_config("model", request.param, TINY), layers=2)
    return spec, synthetic_decoder_weights(spec, torch.float32, seed=0)


def test_spec_is_the_model_yaml_capped():
    spec = synthetic_spec(group_config("model", "opt_6_7b"), layers=8)
    assert (spec.n_layers, spec.d_model, spec.d_ffn, spec.n_heads) == (8, 4096, 16384, 32)
    assert spec.stats is not None and spec.stats.token_sparsity == pytest.approx(0.97)
    assert synthetic_spec(group_config("model", "opt_6_7b"), layers=100).n_layers == 32


def test_weights_have_the_spec_shape_and_are_seeded(tiny):
    spec, w = tiny
    assert w.n_layers == 2 and w.d_model == 64 and w.vocab_size == 300
    ffn = w.layers[0].ffn
    assert ffn.d_ffn == 256 and ffn.kind == spec.ffn_kind
    down, down_t = (ffn.w2, ffn.w2_t) if spec.ffn_kind.value == "relu" else \
        (ffn.w_down, ffn.w_down_t)
    assert down.is_contiguous() and down_t.is_contiguous() and torch.equal(down, down_t.t())
    again = synthetic_decoder_weights(spec, torch.float32, seed=0)
    assert torch.equal(again.layers[1].attn.wq, w.layers[1].attn.wq)
    other = synthetic_decoder_weights(spec, torch.float32, seed=1)
    assert not torch.equal(other.layers[1].attn.wq, w.layers[1].attn.wq)
    assert synthetic_decoder_weights(spec, torch.float16).dtype == torch.float16


def test_dense_and_all_active_sparse_agree(tiny):
    spec, w = tiny
    ids = torch.randint(0, spec.vocab_size, (1, 5), generator=torch.Generator().manual_seed(0))
    dense = Decoder(w).generate(ids, 6, return_logits=True)
    sparse = Decoder(w, ffn=SparseFFN(w, "sparse_cpu", AllActive(spec.d_ffn))).generate(
        ids, 6, return_logits=True)
    assert torch.isfinite(dense.logits).all()
    assert torch.equal(dense.tokens, sparse.tokens)
    torch.testing.assert_close(sparse.logits, dense.logits, rtol=1e-4, atol=1e-4)


def test_trace_replay_follows_the_profile(tiny):
    spec, w = tiny
    profile = trace_profile(synthetic_spec(group_config("model", "opt_6_7b", TINY)), 2,
                            trace_tokens=16)
    assert profile.layer_ids == [0, 31]  # evenly spaced over the full model's depth
    sets = TraceReplay(profile)
    first = [sets.predict(layer, torch.zeros(1, spec.d_model)) for layer in range(2)]
    assert sets.step == 1
    union = sets.predict(0, torch.zeros(3, spec.d_model))
    assert set(union.tolist()) >= set(sets.sets[0][1].tolist()) | set(sets.sets[0][3].tolist())
    sets.rewind()
    assert torch.equal(sets.predict(0, torch.zeros(1, spec.d_model)), first[0])


def test_synthetic_engines_run_side_by_side(tiny):
    spec, w = tiny
    full = synthetic_spec(group_config("model", "opt_6_7b", TINY))
    engines, pbytes = build_synthetic_engines(w, trace_profile(full, 2, 32), "sparse_cpu",
                                              predictor_rank=8, torch_linear_baseline=True)
    assert list(engines) == ["dense", "dense F.linear", "trace", "trace+predictor r8"]
    assert engines["dense F.linear"].linear is torch.nn.functional.linear
    assert pbytes["trace"] == 0 and pbytes["trace+predictor r8"] == 2 * (64 * 8 + 8 * 256) * 4
    rows = run_decode_bench(torch.randint(0, spec.vocab_size, (1, 4)), engines, pbytes,
                            rounds=2, new_tokens=4, threads=1)
    assert [r.predictor for r in rows] == ["none", "dense F.linear", "trace",
                                           "trace+predictor r8"]
    assert 0 < rows[2].computed_fraction < 0.5  # OPT's ~97% inactive, union over the prompt
    assert all(r.decode_tokens_per_s > 0 and r.achieved_gbps > 0 for r in rows)


def test_spec_less_model_is_refused():
    with pytest.raises(ValueError, match="no `spec` section"):
        synthetic_spec(group_config("model", "opt_125m"))


def test_cli_writes_the_realsize_csv(run_cli, tmp_path, capsys):
    run_dir = tmp_path / "bench"
    run_cli(["bench-decode", "model@task.synthetic_model=opt_6_7b",
             *(f"task.synthetic_model.{o}" for o in TINY),
             "task.layers=2", "task.dtype=fp32", "task.rounds=2", "task.predictor_rank=8",
             "bench.prompt_tokens=4", "bench.new_tokens=3", f"hydra.run.dir={run_dir}"])
    (out,) = run_dir.glob("realsize_*.csv")
    printed = capsys.readouterr().out
    assert "synthetic weights: only speed is meaningful" in printed
    frame = pd.read_csv(out)
    assert list(frame["predictor"]) == ["none", "trace", "trace+predictor r8"]
    assert set(frame["weights"]) == {"synthetic"} and set(frame["layers"]) == {2}
    assert set(frame["model_layers"]) == {32} and set(frame["dtype"]) == {"fp32"}
    assert (frame["dram_gbps"] > 0).all() and (frame["bandwidth_fraction"] > 0).all()
    assert (frame["dram_gbps"] >= frame["dram_gbps_before"]).all()
    assert (frame["bandwidth_fraction_best"] >= frame["bandwidth_fraction"] * 0.999).all()
