"""powerbench.measure.token_overlap on hand-built models: the traced masks are the
profiler's active neurons token by token (ReLU), or the CATS rule's (SwiGLU)."""

from __future__ import annotations

import numpy as np
import pytest

from powerbench.measure.token_overlap import model_overlap, traced_masks

from .helpers import expected_mask, hand_built_opt, tiny_llama
from .test_profiler import TEXTS, expected_tokens


def test_relu_masks_are_the_active_neurons_of_consecutive_tokens():
    masks = traced_masks(hand_built_opt(), TEXTS, tokens=15, seq_len=5)
    tokens = expected_tokens(TEXTS, 5)[:15]
    for layer, mask in enumerate(masks):
        truth = np.stack([expected_mask(t, layer) for t in tokens])
        np.testing.assert_array_equal(mask, truth)


def test_swiglu_masks_keep_the_cats_share_and_label_it():
    loaded = tiny_llama(act="silu")
    masks = traced_masks(loaded, TEXTS, tokens=15, seq_len=5, target_sparsity=0.75)
    for mask in masks:  # |silu(gate)| above the layer's 75% quantile: a quarter kept
        assert mask.mean() == pytest.approx(0.25, abs=1.5 / mask.size)
    stats = model_overlap(loaded, TEXTS, tokens=15, seq_len=5, target_sparsity=0.75)
    assert stats.model.endswith("(CATS 0.75)") and stats.active == pytest.approx(0.25, abs=0.01)
