"""coverage_share, mask packing and the profile dataclass on hand-computed arrays."""

from __future__ import annotations

import numpy as np
import pytest

from powerbench.profiling.activation_profile import (
    ActivationProfile,
    LayerProfile,
    coverage_share,
    pack_masks,
    unpack_masks,
)


@pytest.mark.parametrize("counts, coverage, share", [
    ([10, 0, 0, 0], 0.8, 0.25),
    ([5, 3, 1, 1], 0.8, 0.5),  # 5 + 3 = 8 of 10
    ([5, 2, 2, 1], 0.8, 0.75),  # 5 + 2 = 7 < 8, + 2 = 9
    ([1, 1, 1, 1], 0.8, 1.0),  # 3 of 4 cover only 75%
    ([1, 1, 1, 1], 0.75, 0.75),
    ([0, 0, 0], 0.8, 0.0),
    ([1, 3, 5, 0, 0, 1], 0.5, 1 / 6),  # order does not matter
])
def test_coverage_share(counts, coverage, share):
    assert coverage_share(np.array(counts), coverage) == pytest.approx(share)


def test_pack_roundtrip_odd_width():
    rng = np.random.default_rng(0)
    masks = rng.random((7, 13)) < 0.3
    packed = pack_masks(masks)
    assert packed.shape == (7, 2) and packed.dtype == np.uint8
    np.testing.assert_array_equal(unpack_masks(packed, 13), masks)
    assert pack_masks(np.eye(8, dtype=bool))[:, 0].tolist() == [1, 2, 4, 8, 16, 32, 64, 128]


def test_trace_unions_are_the_unions_of_the_unpacked_rows():
    rng = np.random.default_rng(1)
    masks = rng.random((9, 13)) < 0.3
    layer = LayerProfile(0, masks.sum(axis=0), 9, np.full(9, 0.3, np.float32),
                         trace=pack_masks(masks))
    groups = np.array([[0, 1, 2], [3, 4, 5], [8, 0, 1]])
    np.testing.assert_array_equal(unpack_masks(layer.trace_unions(groups), 13),
                                  masks[groups].any(axis=1))
    assert LayerProfile(0, masks.sum(axis=0), 9, np.zeros(9, np.float32)).trace_unions(
        groups) is None


def test_profile_statistics_and_traces():
    trace = np.array([[1, 0, 0, 1], [0, 0, 1, 1], [1, 1, 1, 1]], dtype=bool)
    layers = [
        LayerProfile(0, np.array([8, 0, 0, 0]), 10, np.full(10, 0.2, np.float32),
                     trace=pack_masks(trace)),
        LayerProfile(1, np.array([2, 2, 2, 2]), 10, np.full(10, 0.8, np.float32),
                     trace=pack_masks(~trace)),
    ]
    p = ActivationProfile("m", "measured", "d", 10, layers)
    assert p.sparsity == pytest.approx(1 - (8 / 40 + 8 / 40) / 2)
    assert p.block_skew() == pytest.approx((0.25 + 1.0) / 2)
    assert p.model_skew() == pytest.approx(4 / 8)  # 8 + 2 + 2 = 12 < 12.8 of 16; + 2
    np.testing.assert_allclose(p.frequencies(), [[0.8, 0, 0, 0], [0.2] * 4])
    assert p.trace_tokens == 3
    np.testing.assert_array_equal(layers[0].trace_masks(), trace)
    np.testing.assert_array_equal(layers[1].trace_masks(1, 2), ~trace[1:2])
    step = p.trace_step(2)
    assert [s.tolist() for s in step] == [[True] * 4, [False] * 4]
