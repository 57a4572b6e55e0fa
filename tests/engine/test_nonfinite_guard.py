"""Our decoder stops a generation whose activations become NaN/inf, naming the layer."""

from __future__ import annotations

import pytest
import torch

from powerbench.engine.decoder import Decoder
from powerbench.engine.weights import extract_weights
from powerbench.model.guard import NonFiniteError

from .conftest import make_opt


def _decoder(tokenizer) -> Decoder:
    """Its own model: the test writes into the weights (shared with the HF parameters)."""
    return Decoder(extract_weights(make_opt(tokenizer), dtype=torch.float32))


def test_inf_activations_in_our_decoder_fail_naming_the_layer(tokenizer):
    decoder = _decoder(tokenizer)
    decoder.w.layers[1].ffn.b2.fill_(float("inf"))  # layer 1's FFN output overflows
    ids = torch.randint(0, 100, (1, 6), generator=torch.Generator().manual_seed(0))
    with pytest.raises(NonFiniteError, match="engine stage.*decoder layer 1"):
        decoder.generate(ids, 3)


def test_finite_generation_is_untouched_by_the_guard(tokenizer):
    decoder = _decoder(tokenizer)
    ids = torch.randint(0, 100, (1, 6), generator=torch.Generator().manual_seed(0))
    assert decoder.generate(ids, 3).tokens.shape == (1, 3)
