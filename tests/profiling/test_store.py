"""Profile files round-trip; the profile cache hits, misses on new inputs, and rebuilds
corrupt entries."""

from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
import pytest
import torch

from powerbench.config.schema import ProfilingConfig
from powerbench.profiling.store import (
    ProfileFormatError,
    load_or_profile,
    load_profile,
    profile_cache_key,
    save_profile,
)
from powerbench.profiling.synthetic import synthetic_profile

from .helpers import hand_built_opt, tiny_llama

TEXTS = ["abcdefgh" * 4, "hgfedcba" * 3, "jihg"]
CFG = ProfilingConfig(max_tokens=64, seq_len=16, samples_per_layer=20, trace_tokens=12,
                    batch_size=2)


def assert_same(a, b):
    assert (a.model, a.source, a.dataset, a.n_tokens, a.meta) == (
        b.model, b.source, b.dataset, b.n_tokens, b.meta)
    if a.sample_positions is None:
        assert b.sample_positions is None
    else:
        np.testing.assert_array_equal(a.sample_positions, b.sample_positions)
    for la, lb in zip(a.layers, b.layers, strict=True):
        assert la.index == lb.index and la.n_tokens == lb.n_tokens
        for field in ("counts", "token_active", "hidden", "masks", "trace"):
            x, y = getattr(la, field), getattr(lb, field)
            if x is None:
                assert y is None, field
            else:
                assert x.dtype == y.dtype, field
                np.testing.assert_array_equal(x, y, err_msg=field)


def test_measured_round_trip(tmp_path):
    profile = load_or_profile(tiny_llama(), TEXTS, CFG, "t", tmp_path, progress=False)[0]
    path = tmp_path / "p.npz"
    save_profile(profile, path)
    back = load_profile(path)
    assert_same(profile, back)
    assert back.layers[0].masks.dtype == bool and back.layers[0].hidden.dtype == np.float16


def test_synthetic_round_trip_odd_neuron_count(tmp_path, load_spec):
    spec = replace(load_spec("opt_13b"), n_layers=3, d_ffn=1001)
    profile = synthetic_profile(spec, trace_tokens=5, n_tokens=1000)
    save_profile(profile, tmp_path / "s.npz")
    back = load_profile(tmp_path / "s.npz")
    assert_same(profile, back)
    assert back.layers[2].trace_masks().shape == (5, 1001)


def test_cache_hit_and_keys(tmp_path):
    loaded = hand_built_opt()
    first, hit1 = load_or_profile(loaded, TEXTS, CFG, "t", tmp_path, progress=False)
    second, hit2 = load_or_profile(loaded, TEXTS, CFG, "t", tmp_path, progress=False)
    assert (hit1, hit2) == (False, True)
    assert_same(first, second)
    assert len(list((tmp_path / "profiles").glob("*.npz"))) == 1
    key = profile_cache_key(loaded, TEXTS, CFG, "t")
    assert key.startswith("hand_opt-")
    assert profile_cache_key(loaded, TEXTS, replace(CFG, batch_size=7), "t") == key
    for changed in (
        profile_cache_key(loaded, TEXTS[:2], CFG, "t"),
        profile_cache_key(loaded, TEXTS, CFG, "other"),
        profile_cache_key(loaded, TEXTS, replace(CFG, max_tokens=32), "t"),
        profile_cache_key(loaded, TEXTS, replace(CFG, samples_per_layer=5), "t"),
        profile_cache_key(loaded, TEXTS, CFG, "t", seed=1),
        profile_cache_key(replace(loaded, weights_hash="hub:x@1"), TEXTS, CFG, "t"),
    ):
        assert changed != key
    with torch.no_grad():  # no weights_hash: the weights themselves are hashed
        loaded.model.model.decoder.layers[0].fc1.bias[3] += 1.0
    assert profile_cache_key(loaded, TEXTS, CFG, "t") != key


def _entry(tmp_path):
    (path,) = (tmp_path / "profiles").glob("*.npz")
    return path


@pytest.mark.parametrize("damage", ["truncate", "overwrite", "garbage_with_valid_checksum"])
def test_corrupt_entry_is_rebuilt(tmp_path, caplog, damage):
    loaded = hand_built_opt()
    original, _ = load_or_profile(loaded, TEXTS, CFG, "t", tmp_path, progress=False)
    path = _entry(tmp_path)
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "overwrite":
        mid = len(data) // 2
        path.write_bytes(data[:mid] + bytes(b ^ 0xFF for b in data[mid:mid + 64])
                         + data[mid + 64:])
    else:  # bytes and checksum agree, but it is not a profile: the load itself must fail
        import json

        from powerbench.cache import file_sha256

        path.write_bytes(b"PK\x03\x04 not really a zip" * 10)
        sidecar = path.with_name(path.name + ".json")
        meta = json.loads(sidecar.read_text())
        sidecar.write_text(json.dumps(dict(meta, sha256=file_sha256(path))))
    with caplog.at_level(logging.WARNING, logger="powerbench.cache"):
        rebuilt, hit = load_or_profile(loaded, TEXTS, CFG, "t", tmp_path, progress=False)
    assert hit is False
    assert "rebuilding" in caplog.text
    assert_same(original, rebuilt)
    again, hit = load_or_profile(loaded, TEXTS, CFG, "t", tmp_path, progress=False)
    assert hit is True
    assert_same(original, again)


def test_inconsistent_file_rejected(tmp_path, load_spec):
    profile = synthetic_profile(replace(load_spec("opt_13b"), n_layers=2, d_ffn=64),
                                trace_tokens=4, n_tokens=100)
    profile.layers[1].token_active = profile.layers[1].token_active[:50]
    save_profile(profile, tmp_path / "bad.npz")
    with pytest.raises(ProfileFormatError, match="L1.token_active"):
        load_profile(tmp_path / "bad.npz")
