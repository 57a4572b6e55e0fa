"""The weight file: exact round trips, alignment, and clear failures that get rebuilt."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from powerbench.flash.layout import (
    ALIGN,
    LayoutError,
    geometry_for,
    layers_of,
    weights_fingerprint,
)
from powerbench.flash.layout_io import (
    ensure_layout,
    open_layout,
    read_header,
    read_layout,
    write_layout,
)


def _write(tmp_path, weights, bundled, cluster_neurons=None, name="w.pbflash"):
    layers = layers_of(weights)
    kind = weights.layers[0].ffn.kind.value
    g = geometry_for(layers, kind, bundled, cluster_neurons)
    header = write_layout(tmp_path / name, layers, g, weights_fingerprint(layers, kind))
    return tmp_path / name, header, layers


@pytest.mark.parametrize("bundled", [True, False])
@pytest.mark.parametrize("model", ["opt_weights", "reglu_weights", "swiglu_weights"])
@pytest.mark.parametrize("cluster_neurons", [None, 1, 7])
def test_round_trip_is_exact(tmp_path, request, model, bundled, cluster_neurons):
    weights = request.getfixturevalue(model)
    path, header, layers = _write(tmp_path, weights, bundled, cluster_neurons)
    back_header, back = read_layout(path)
    assert back_header == header
    assert len(back) == len(layers)
    for a, b in zip(layers, back, strict=True):
        assert len(a.parts) == len(b.parts) == header.geometry.n_parts
        for pa, pb in zip(a.parts, b.parts, strict=True):
            assert pb.dtype == pa.dtype and torch.equal(pa, pb)  # bit exact
        if a.b1 is None:
            assert b.b1 is None and b.b2 is None
        else:
            assert torch.equal(a.b1, b.b1) and torch.equal(a.b2, b.b2)


@pytest.mark.parametrize("bundled", [True, False])
def test_fp16_and_alignment(tmp_path, opt_weights, bundled):
    from dataclasses import replace

    half = replace(opt_weights, layers=[replace(layer, ffn=replace(
        layer.ffn, w1=layer.ffn.w1.half(), w2_t=layer.ffn.w2_t.half()))
        for layer in opt_weights.layers])
    path, header, layers = _write(tmp_path, half, bundled, cluster_neurons=5)
    g = header.geometry
    assert g.dtype == "float16" and g.cluster_neurons == 5 and g.n_clusters == -(-96 // 5)
    assert header.header_bytes % ALIGN == 0 and g.cluster_bytes % ALIGN == 0
    assert all(off % ALIGN == 0 for off in header.layer_offsets)
    offs, lens, dests = g.cluster_extents(header.layer_offsets[1], np.array([0, 3, 19]))
    assert np.all(offs % ALIGN == 0) and np.all(lens % ALIGN == 0) and np.all(dests % ALIGN == 0)
    assert len(offs) == (3 if bundled else 3 * g.n_parts)
    assert path.stat().st_size == header.file_bytes
    _, back = read_layout(path)
    assert torch.equal(back[1].parts[1], layers[1].parts[1])


def test_bundled_cluster_holds_each_neurons_rows_together(tmp_path, opt_weights):
    path, header, layers = _write(tmp_path, opt_weights, True, cluster_neurons=1)
    g = header.geometry
    raw = path.read_bytes()
    off = header.layer_offsets[0] + 5 * g.cluster_bytes  # neuron 5 of layer 0
    bundle = np.frombuffer(raw[off: off + g.bundle_bytes], dtype=np.float32)
    expect = torch.cat([layers[0].parts[0][5], layers[0].parts[1][5]]).numpy()
    assert np.array_equal(bundle, expect)


def test_broken_files_fail_clearly(tmp_path, opt_weights):
    path, header, layers = _write(tmp_path, opt_weights, True)
    good = path.read_bytes()
    # truncated
    path.write_bytes(good[: header.file_bytes - ALIGN])
    with pytest.raises(LayoutError, match="truncated"):
        open_layout(path)
    # not ours
    path.write_bytes(b"GARBAGE!" + good[8:])
    with pytest.raises(LayoutError, match="bad magic"):
        read_header(path)
    # corrupt header text
    bad = bytearray(good)
    bad[40] ^= 0xFF
    path.write_bytes(bytes(bad))
    with pytest.raises(LayoutError, match="header checksum"):
        read_header(path)
    # corrupt payload: the header checks pass, the full check does not
    bad = bytearray(good)
    bad[header.layer_offsets[1] + 3] ^= 0xFF
    path.write_bytes(bytes(bad))
    open_layout(path)
    with pytest.raises(LayoutError, match="layer 1 payload checksum"):
        open_layout(path, verify="full")
    # empty / unreadable
    path.write_bytes(b"")
    with pytest.raises(LayoutError, match="too short"):
        read_header(path)
    with pytest.raises(LayoutError, match="unreadable"):
        read_header(tmp_path / "missing.pbflash")


def test_stale_or_other_geometry_is_refused(tmp_path, opt_weights):
    path, header, layers = _write(tmp_path, opt_weights, True)
    with pytest.raises(LayoutError, match="stale"):
        open_layout(path, header.geometry, fingerprint="deadbeef")
    from dataclasses import replace

    with pytest.raises(LayoutError, match="written for"):
        open_layout(path, replace(header.geometry, bundled=False))


@pytest.mark.parametrize("damage", ["truncate", "payload", "stale"])
def test_ensure_layout_rebuilds_with_a_warning(tmp_path, opt_weights, damage):
    layers = layers_of(opt_weights)
    g = geometry_for(layers, "relu", True)
    fp = weights_fingerprint(layers, "relu")
    path = tmp_path / "w.pbflash"
    header, rebuilt = ensure_layout(path, layers, g, fp)
    assert rebuilt
    good = path.read_bytes()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ensure_layout(path, layers, g, fp, verify="full") == (header, False)
    if damage == "truncate":
        path.write_bytes(good[:-ALIGN])
        match = "truncated"
    elif damage == "payload":
        bad = bytearray(good)
        bad[header.layer_offsets[0] + 1] ^= 1
        path.write_bytes(bytes(bad))
        match = "checksum"
    else:  # other weights of the same shapes
        layers = [type(a)(tuple(p + 1 for p in a.parts), a.b1, a.b2) for a in layers]
        fp = weights_fingerprint(layers, "relu")
        match = "stale"
    with pytest.warns(RuntimeWarning, match=f"rebuilt: .*{match}"):
        _, rebuilt = ensure_layout(path, layers, g, fp, verify="full")
    assert rebuilt
    _, back = read_layout(path)
    assert torch.equal(back[0].parts[0], layers[0].parts[0])
    assert not list(tmp_path.glob("*.tmp*"))  # the temporary file was renamed


def test_fingerprint_sees_a_single_changed_weight(opt_weights):
    layers = layers_of(opt_weights)
    before = weights_fingerprint(layers, "relu")
    w = layers[1].parts[1].clone()
    w[50, 7] += 1.0
    changed = [layers[0], type(layers[1])((layers[1].parts[0], w), layers[1].b1, layers[1].b2)]
    assert weights_fingerprint(changed, "relu") != before
