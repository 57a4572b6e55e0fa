"""Bad active sets and arguments fail loudly with the same error type on every backend."""

from __future__ import annotations

import pytest
import torch

from powerbench.ops import Threshold


@pytest.fixture
def data():
    g = torch.Generator().manual_seed(7)
    n, d = 20, 8
    return dict(w=torch.randn(n, d, generator=g), x=torch.randn(2, d, generator=g),
                b2=torch.randn(d, generator=g))


def run_all(ops, data, idx, check=True):
    w, x = data["w"], data["x"]
    return [ops.row(w, x, idx, check=check),
            ops.axpy(w, x[:, :1].expand(2, idx.numel()).contiguous(), idx, check=check),
            ops.ffn_relu(x, w, None, w, data["b2"], idx, check=check),
            ops.ffn_gated(x, w, w, w, idx, check=check)]


@pytest.mark.parametrize("bad", [[0, 20], [-1, 3], [5, 99999]])
def test_out_of_range_ids(ops, data, bad):
    with pytest.raises(IndexError, match="out of range for 20 neurons"):
        ops.row(data["w"], data["x"], torch.tensor(bad))
    with pytest.raises(IndexError, match="out of range"):
        ops.ffn_relu(data["x"], data["w"], None, data["w"], None, torch.tensor(bad))
    with pytest.raises(IndexError, match="out of range"):
        ops.ffn_gated(data["x"], data["w"], data["w"], data["w"], torch.tensor(bad))
    with pytest.raises(IndexError, match="out of range"):
        ops.axpy(data["w"], torch.ones(1, len(bad)), torch.tensor(bad))


def test_duplicate_ids(ops, data):
    idx = torch.tensor([3, 7, 3], dtype=torch.int32)
    with pytest.raises(ValueError, match="neuron 3 twice"):
        ops.row(data["w"], data["x"], idx)
    with pytest.raises(ValueError, match="twice"):
        ops.ffn_relu(data["x"], data["w"], None, data["w"], None, idx)
    with pytest.raises(ValueError, match="twice"):
        ops.axpy(data["w"], torch.ones(1, 3), idx)


@pytest.mark.parametrize("idx", [torch.tensor([1.0, 2.0]), torch.tensor([True, False]),
                                 torch.tensor([1, 2], dtype=torch.int16), [1, 2]])
def test_wrongly_typed_ids(ops, data, idx):
    with pytest.raises(TypeError, match="idx must be"):
        ops.row(data["w"], data["x"], idx)
    with pytest.raises(TypeError, match="idx must be"):
        ops.ffn_relu(data["x"], data["w"], None, data["w"], None, idx)


def test_two_dimensional_ids(ops, data):
    with pytest.raises(ValueError, match="1-D"):
        ops.row(data["w"], data["x"], torch.tensor([[1, 2]]))


def test_check_false_skips_the_data_check_but_valid_ids_still_work(ops, data):
    idx = torch.tensor([4, 1, 9])
    unchecked = run_all(ops, data, idx, check=False)
    checked = run_all(ops, data, idx, check=True)
    for a, b in zip(unchecked, checked, strict=True):
        assert a.shape == b.shape and torch.isfinite(b).all()
        torch.testing.assert_close(a, b)


def test_shape_and_dtype_mismatches(ops, data):
    w, x, idx = data["w"], data["x"], torch.tensor([1, 2])
    with pytest.raises(ValueError, match="x must be"):
        ops.row(w, torch.randn(2, 9), idx)
    with pytest.raises(TypeError, match="float32, float16 or bfloat16"):
        ops.row(w.double(), x, idx)
    with pytest.raises(TypeError, match="w2_t is"):
        ops.ffn_relu(x, w, None, w.half(), None, idx)
    with pytest.raises(ValueError, match="w2_t has shape"):
        ops.ffn_relu(x, w, None, w[:, :4], None, idx)
    with pytest.raises(ValueError, match=r"b1 must have shape \(20,\)"):
        ops.ffn_relu(x, w, torch.zeros(3), w, None, idx)
    with pytest.raises(ValueError, match="coeffs must be"):
        ops.axpy(w, torch.ones(1, 3), idx)
    with pytest.raises(ValueError, match="unknown gated kind 'geglu'"):
        ops.ffn_gated(x, w, w, w, idx, "geglu")
    with pytest.raises(ValueError, match="Threshold.scores must have shape"):
        ops.row(w, x, Threshold(torch.zeros(3)))
