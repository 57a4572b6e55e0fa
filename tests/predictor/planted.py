"""Planted activation data: masks follow a known rule of the hidden state."""

from __future__ import annotations

import numpy as np
import torch

from powerbench.model.loading import LoadedModel
from powerbench.model.spec import FFNKind, ModelSpec
from powerbench.profiling.activation_profile import ActivationProfile, LayerProfile

D_MODEL, NEURONS = 32, 128


def planted_layer(index: int, frequencies: np.ndarray, n: int = 3000, rank: int = 8,
                  seed: int = 0) -> LayerProfile:
    """mask[s, k] = (w_k . x_s + b_k > 0) with unit-norm w_k in a rank-`rank` subspace and
    b_k = Phi^-1(frequency_k), so neuron k fires with probability frequency_k."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, D_MODEL, generator=g)
    w = torch.randn(rank, D_MODEL, generator=g).T @ torch.randn(rank, NEURONS, generator=g)
    w = w / w.norm(dim=0, keepdim=True)
    b = torch.special.ndtri(torch.as_tensor(frequencies, dtype=torch.float32))
    masks = (x @ w + b > 0).numpy()
    counts = masks.sum(0).astype(np.int64)
    return LayerProfile(index=index, counts=counts, n_tokens=n,
                        token_active=masks.mean(1).astype(np.float32),
                        hidden=x.numpy().astype(np.float16), masks=masks)


def flat_frequencies(active: float = 0.1) -> np.ndarray:
    return np.full(NEURONS, active)


def skewed_frequencies(active: float = 0.1, power: float = 1.5) -> np.ndarray:
    """A few hot neurons, a long cold tail; mean `active`."""
    f = 1.0 / np.arange(1, NEURONS + 1) ** power
    for _ in range(50):  # rescale with clipping until the mean matches
        f = np.clip(f * active / f.mean(), 1e-3, 0.95)
    return np.random.default_rng(0).permutation(f)


def make_profile(layers: list[LayerProfile], model: str = "planted") -> ActivationProfile:
    n = layers[0].n_tokens
    return ActivationProfile(model=model, source="measured", dataset="planted", n_tokens=n,
                             layers=layers, sample_positions=np.arange(n))


def planted_spec(n_layers: int, name: str = "planted") -> ModelSpec:
    return ModelSpec(name=name, n_layers=n_layers, d_model=D_MODEL, d_ffn=NEURONS, n_heads=4,
                     n_kv_heads=4, ffn_kind=FFNKind("relu"), vocab_size=1000)


def planted_loaded(n_layers: int, name: str = "planted") -> LoadedModel:
    return LoadedModel(spec=planted_spec(n_layers, name), source="test",
                       weights_hash=f"{name}-weights")
