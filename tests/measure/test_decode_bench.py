"""The decode benchmark: side-by-side rows, the dense baseline, bytes read per token."""

from __future__ import annotations

from dataclasses import asdict

import pytest
import torch
from transformers import OPTConfig, OPTForCausalLM

from powerbench.engine.decoder import Decoder
from powerbench.engine.sparse import SparseFFN
from powerbench.engine.weights import extract_weights
from powerbench.measure.decode_bench import run_decode_bench, weight_bytes_per_token
from powerbench.measure.harness import Report


class FirstHalf:
    """A predictor that always picks the first half of the neurons."""

    def __init__(self, neurons: int) -> None:
        self.ids = torch.arange(neurons // 2)

    def predict(self, layer_idx, x):
        return self.ids


@pytest.fixture(scope="module")
def weights():
    torch.manual_seed(0)
    config = OPTConfig(vocab_size=101, hidden_size=32, ffn_dim=128, num_hidden_layers=2,
                       num_attention_heads=4, max_position_embeddings=64, word_embed_proj_dim=32)
    return extract_weights(OPTForCausalLM(config).eval())


def test_weight_bytes_per_token_by_hand(weights):
    dec = Decoder(weights)
    attn = 2 * 4 * (32 * 32 + 32) * 4  # two layers of Q, K, V, O with biases, fp32
    lm_head = 101 * 32 * 4
    ffn = 2 * 2 * 128 * 32 * 4  # two layers of fc1 + fc2 weights
    assert weight_bytes_per_token(dec, 1.0) == attn + lm_head + ffn
    assert weight_bytes_per_token(dec, 0.25, predictor_bytes=100) == \
        attn + lm_head + ffn / 4 + 100


def test_rows_side_by_side(weights):
    dense = Decoder(weights)
    sparse = Decoder(weights, ffn=SparseFFN(weights, "sparse_torch", FirstHalf(128)))
    ids = torch.randint(0, 101, (1, 6))
    rows = run_decode_bench(ids, {"dense": dense, "half": sparse}, {"half": 64}, rounds=2,
                            new_tokens=4, threads=1)
    assert [r.predictor for r in rows] == ["none", "half"]
    assert rows[0].speedup_vs_dense == 1.0 and rows[0].computed_fraction == 1.0
    assert rows[1].computed_fraction == pytest.approx(0.5)
    assert rows[1].engine == "sparse_torch"
    assert all(r.decode_tokens_per_s > 0 and r.ffn_us_per_call > 0 for r in rows)
    table = Report("decode", "t", [asdict(r) for r in rows], key=("engine", "predictor")).table()
    assert "sparse_torch" in table


def test_dense_baseline_is_required(weights):
    with pytest.raises(ValueError, match="dense engine"):
        run_decode_bench(torch.zeros(1, 4, dtype=torch.long), {"x": Decoder(weights)}, {},
                         rounds=1, new_tokens=2, threads=1)


def test_ffn_timing_skips_prompt_calls():
    from powerbench.measure.decode_bench import _TimedFFN

    timed = _TimedFFN(lambda i, x, obs=None: x, rows=1)
    timed(0, torch.zeros(3, 4))  # a prompt of 3 rows
    timed(0, torch.zeros(1, 4))  # one decode step
    assert timed.calls == 1


def test_knob_variants_time_each_engine_under_its_setting(weights, monkeypatch):
    """Each engine once per knob variant, in the same rounds (the dense baseline at the
    defaults, plus the dense engine under every other variant): every kernel call of a
    variant's generation, the dense projections' as the FFN's, sees that setting, and every
    later call the defaults."""
    import torch.nn.functional as F

    from powerbench.measure.decode_bench import with_knob_variants
    from powerbench.ops import get_backend

    try:
        ops = get_backend("sparse_cpu", fallback=False)
    except Exception as err:  # no compiler here
        pytest.skip(f"sparse_cpu unavailable: {err}")
    defaults = ops.knobs()
    seen: dict[str, set[int]] = {"ffn": set(), "linear": set()}

    class Recording(SparseFFN):
        def __call__(self, layer_idx, x, observer=None):
            seen["ffn"].add(ops.knobs()["wide_adjacent_pct"])
            return super().__call__(layer_idx, x, observer)

    def linear(x, w, bias=None):
        seen["linear"].add(ops.knobs()["wide_adjacent_pct"])
        return F.linear(x, w, bias)

    dense = Decoder(weights, linear=linear)
    sparse = Decoder(weights, ffn=Recording(weights, "sparse_cpu", FirstHalf(128)))
    pbytes = {"half": 64}
    engines = with_knob_variants({"dense": dense, "half": sparse}, pbytes,
                                 ["default", "wide_adjacent_pct:7"])
    assert list(engines) == ["dense", "dense [wide_adjacent_pct:7]", "half [default]",
                             "half [wide_adjacent_pct:7]"]
    assert pbytes["half [wide_adjacent_pct:7]"] == 64
    ids = torch.randint(0, 101, (1, 6))
    rows = run_decode_bench(ids, engines, pbytes, rounds=2, new_tokens=4, threads=1)
    assert [r.predictor for r in rows] == ["none", "dense [wide_adjacent_pct:7]",
                                           "half [default]", "half [wide_adjacent_pct:7]"]
    assert seen == {"ffn": {defaults["wide_adjacent_pct"], 7},
                    "linear": {defaults["wide_adjacent_pct"], 7}}
    assert ops.knobs() == defaults
    assert with_knob_variants({"dense": dense}, {}, []) == {"dense": dense}
