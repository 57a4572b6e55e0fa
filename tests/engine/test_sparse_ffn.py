"""engine=sparse_*: the sparse FFN equals the dense one on the neurons the predictor picks."""

from __future__ import annotations

import pytest
import torch
from transformers import OPTConfig, OPTForCausalLM

from powerbench.engine.decoder import Decoder
from powerbench.engine.ffn import DenseFFN
from powerbench.engine.sparse import SparseFFN
from powerbench.engine.weights import extract_weights


class TrueMask:
    """A predictor that returns the exact active set (what the oracle does)."""

    def __init__(self, weights, drop: int = 0) -> None:
        self.weights, self.drop = weights, drop

    def predict(self, layer_idx, x):
        f = self.weights.layers[layer_idx].ffn
        active = ((x.float() @ f.w1.float().T + f.b1.float()) > 0).any(0)
        ids = torch.nonzero(active).flatten()
        return ids[self.drop:]


@pytest.fixture(scope="module")
def weights():
    torch.manual_seed(0)
    config = OPTConfig(vocab_size=97, hidden_size=32, ffn_dim=96, num_hidden_layers=2,
                       num_attention_heads=4, max_position_embeddings=64, word_embed_proj_dim=32)
    return extract_weights(OPTForCausalLM(config).eval())


def test_sparse_with_true_mask_equals_dense(weights):
    ids = torch.randint(0, 97, (2, 10))
    dense = Decoder(weights, ffn=DenseFFN(weights))
    sparse = Decoder(weights, ffn=SparseFFN(weights, backend="sparse_torch",
                                            predictors=TrueMask(weights)))
    a = dense.generate(ids, 5, return_logits=True)
    b = sparse.generate(ids, 5, return_logits=True)
    assert torch.equal(a.tokens, b.tokens)
    torch.testing.assert_close(a.logits, b.logits, rtol=1e-4, atol=1e-4)


def test_missed_neurons_change_the_output(weights):
    ids = torch.randint(0, 97, (1, 8))
    ffn = SparseFFN(weights, backend="sparse_torch", predictors=TrueMask(weights, drop=5))
    dense_logits = Decoder(weights, ffn=DenseFFN(weights)).generate(ids, 2, return_logits=True)
    sparse_logits = Decoder(weights, ffn=ffn).generate(ids, 2, return_logits=True)
    assert not torch.allclose(dense_logits.logits, sparse_logits.logits, atol=1e-5)
    assert 0 < ffn.metrics()["sparse_computed_fraction"] < 1


def test_sparse_engine_needs_a_predictor(weights):
    with pytest.raises(ValueError, match="predictor=fixed"):
        SparseFFN(weights, backend="sparse_torch", predictors=None)


class CountingOracle(TrueMask):
    """An idealised predictor (its cost is not to be timed) that counts its calls."""

    idealised = True
    strategy = "oracle"

    def __init__(self, weights) -> None:
        super().__init__(weights)
        self.calls = 0
        self.shape = type("Shape", (), {"n_layers": weights.n_layers})()

    def predict(self, layer_idx, x):
        self.calls += 1
        return super().predict(layer_idx, x)


def test_oracle_sets_are_recorded_once_and_replayed(weights):
    ids = torch.randint(0, 97, (1, 6))
    oracle = CountingOracle(weights)
    ffn = SparseFFN(weights, backend="sparse_torch", predictors=oracle)
    decoder = Decoder(weights, ffn=ffn)
    first = decoder.generate(ids, 4, return_logits=True)
    calls = oracle.calls
    assert calls == weights.n_layers * 4  # prefill + 3 decode steps, every layer
    for _ in range(2):
        ffn.rewind()
        again = decoder.generate(ids, 4, return_logits=True)
        assert oracle.calls == calls  # nothing asked: the recording answered
        assert torch.equal(first.logits, again.logits)
    assert ffn.metrics()["oracle_replayed_share"] == pytest.approx(2 / 3)
    ffn.rewind()
    decoder.generate(ids, 6)  # longer than the recording: the oracle answers the rest
    assert oracle.calls == calls + 2 * weights.n_layers


def test_prompts_from_dense_from_rows_run_the_dense_ffn(weights):
    ids = torch.randint(0, 97, (1, 12))
    dense = Decoder(weights, ffn=DenseFFN(weights)).generate(ids, 2, return_logits=True)
    lossy = TrueMask(weights, drop=5)  # would change the output wherever it is used
    big = Decoder(weights, ffn=SparseFFN(weights, backend="sparse_torch", predictors=lossy,
                                         dense_from_rows=12)).generate(ids, 2, return_logits=True)
    small = Decoder(weights, ffn=SparseFFN(weights, backend="sparse_torch", predictors=lossy,
                                           dense_from_rows=0)).generate(ids, 2, return_logits=True)
    # the 12-row prompt ran densely: its logits (the first token's) equal dense
    torch.testing.assert_close(big.logits[:, 0], dense.logits[:, 0])
    assert not torch.allclose(small.logits[:, 0], dense.logits[:, 0], atol=1e-5)
