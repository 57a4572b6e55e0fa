"""Small hand-built models, profiles and machines whose optimum can be enumerated."""

from __future__ import annotations

import numpy as np
import pytest

from powerbench.hardware.hardware_profile import ComputeUnit, HardwareProfile, Link, MemoryTier
from powerbench.model.spec import ModelSpec
from powerbench.profiling.activation_profile import ActivationProfile, LayerProfile

N_TOKENS = 1000


def tiny_spec(n_layers: int = 3, d_ffn: int = 5, d_model: int = 8) -> ModelSpec:
    """fp16 neuron = 2 matrices x d_model x 2 B = 32 B at d_model 8."""
    return ModelSpec(name="tiny", n_layers=n_layers, d_model=d_model, d_ffn=d_ffn, n_heads=2,
                     n_kv_heads=2, ffn_kind="relu", vocab_size=16, max_positions=4)


def profile_from_counts(counts: np.ndarray, n_tokens: int = N_TOKENS) -> ActivationProfile:
    layers = [LayerProfile(index=i, counts=np.asarray(c, dtype=np.int64), n_tokens=n_tokens,
                           token_active=np.zeros(1))
              for i, c in enumerate(counts)]
    return ActivationProfile(model="tiny", source="synthetic", dataset="hand", n_tokens=n_tokens,
                             layers=layers)


def random_profile(spec: ModelSpec, seed: int) -> ActivationProfile:
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, N_TOKENS, size=(spec.n_layers, spec.neurons_per_layer))
    counts[rng.random(counts.shape) < 0.2] = 0  # some neurons never fire
    return profile_from_counts(counts)


def machine(gpu_bytes: float, cpu_bytes: float, cpu_bw: float = 1e9, gpu_bw: float = 1e12,
            sync_s: float = 1e-5, unified: bool = False) -> HardwareProfile:
    """A two-tier machine with exact byte capacities."""
    memories = {"dram": MemoryTier("dram", "dram", cpu_bytes, 0.0, None, cpu_bw)}
    if not unified:
        memories["vram"] = MemoryTier("vram", "vram", gpu_bytes, 0.0, None, gpu_bw)
    units = {"cpu": ComputeUnit("cpu", "cpu", "test cpu", "dram"),
             "gpu": ComputeUnit("gpu", "gpu", "test gpu", "dram" if unified else "vram",
                                effective_bw=gpu_bw if unified else None)}
    link = None if unified else Link("pcie", None, 1e10, None, 1e10)
    return HardwareProfile(name="test", description="", memories=memories, units=units,
                           host="cpu", accelerator="gpu", link=link, sync_s=sync_s,
                           launch_s=1e-6)


# Solver settings that leave exactly the FFN neurons to place: no buffers, predictors or
# output projection on the GPU, every dense part on the CPU.
BARE = dict(gpu_buffer_gb=0.0, cpu_buffer_gb=0.0, predictor_hidden=0, dense_gpu_share=0.0,
            lm_head_on_gpu=False, context=4)


@pytest.fixture
def spec() -> ModelSpec:
    return tiny_spec()
