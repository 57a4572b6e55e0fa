"""What the `local` profile's stream test reads: a decoder layer's matrices, as decode
streams them, layer after layer until the working set is full."""

from __future__ import annotations

import dataclasses

import pytest

from powerbench.hardware.config import LocalHardwareConfig
from powerbench.measure.calibration import layer_matrix_shapes, working_set_matrices
from powerbench.measure.local_kernels import STREAMS, measure_kernel


def test_layer_matrices_are_the_decoders_products():
    """OPT-1.3B: Q/K/V stacked [6144, 2048], O [2048, 2048], fc1 [8192, 2048] and fc2
    stored [out, in] = [2048, 8192]: 50.3 M weights, as one layer of the model."""
    shapes = layer_matrix_shapes(2048, 8192)
    assert shapes == [(6144, 2048), (2048, 2048), (8192, 2048), (2048, 8192)]
    assert sum(r * c for r, c in shapes) == 4 * 2048**2 + 2 * 2048 * 8192


def test_working_set_is_filled_layer_after_layer():
    """d 64, ffn 256, fp32: one layer is 192x64 + 64x64 + 256x64 + 64x256 = 49152 weights,
    196608 bytes; 400000 bytes need two layers (393216) and the next
    layer's Q/K/V (49152 bytes more): 9 matrices, 442368 bytes."""
    layout = working_set_matrices(400_000, layer_matrix_shapes(64, 256), 4)
    assert len(layout) == 9 and layout[8] == (192, 64)
    assert sum(r * c for r, c in layout) * 4 == 442_368
    # a working set smaller than one layer still reads each matrix once
    assert working_set_matrices(10, layer_matrix_shapes(64, 256), 4) == \
        layer_matrix_shapes(64, 256)


def test_stream_choice_and_its_error():
    assert STREAMS["ffn_up"](2048, 8192) == [(8192, 2048)]
    assert STREAMS[LocalHardwareConfig().kernel_stream] is layer_matrix_shapes
    bad = dataclasses.replace(LocalHardwareConfig(), kernel_stream="qkv")
    with pytest.raises(ValueError, match=r"kernel_stream: 'qkv' is not one of \['ffn_up', "
                                         r"'layer'\]"):
        measure_kernel(bad, "fp32", 1)
