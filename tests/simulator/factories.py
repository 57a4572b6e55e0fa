"""Hand-built specs, hardware, placements and profiles with round numbers (test helpers)."""

from __future__ import annotations

import numpy as np

from powerbench.hardware.hardware_profile import (
    ComputeUnit,
    HardwareProfile,
    Link,
    MemoryTier,
)
from powerbench.model.spec import ModelSpec
from powerbench.profiling.activation_profile import ActivationProfile, LayerProfile, pack_masks
from powerbench.simulator.config import OpCounts, SimulatorConfig
from powerbench.solver.placement import GPU, DeviceBytes, Placement

GB = 1e9
HUGE_FLOPS = 1e30  # compute never binds unless a test says so


def make_hardware(cpu_bw: float = 10 * GB, gpu_bw: float | None = 100 * GB,
                  link_bw: float = 1 * GB, sync_s: float = 10e-6, launch_s: float = 0.0,
                  cpu_flops: float = HUGE_FLOPS, gpu_flops: float = HUGE_FLOPS,
                  gpu_capacity: float = 1000 * GB) -> HardwareProfile:
    memories = {"dram": MemoryTier("dram", "ddr", 1000 * GB, 0.0, None, cpu_bw)}
    units = {"cpu": ComputeUnit("cpu", "cpu", "test cpu", "dram", effective_flops=cpu_flops)}
    link, accel = None, None
    if gpu_bw is not None:
        memories["vram"] = MemoryTier("vram", "gddr", gpu_capacity, 0.0, None, gpu_bw)
        units["gpu"] = ComputeUnit("gpu", "gpu", "test gpu", "vram", effective_flops=gpu_flops)
        link = Link("pcie", None, link_bw, None, link_bw)
        accel = "gpu"
    return HardwareProfile(name="test", description="hand-made", memories=memories,
                           units=units, host="cpu", accelerator=accel, link=link,
                           sync_s=sync_s, launch_s=launch_s, thread_sync_s=0.0)


def make_spec(n_layers: int = 1, d_model: int = 64, d_ffn: int = 256, vocab: int = 100,
              ffn_kind: str = "relu") -> ModelSpec:
    return ModelSpec(name="toy", n_layers=n_layers, d_model=d_model, d_ffn=d_ffn, n_heads=4,
                     n_kv_heads=4, ffn_kind=ffn_kind, vocab_size=vocab, max_positions=512)


def make_placement(spec: ModelSpec, gpu_ids: list[np.ndarray], attn: str = GPU,
                   lm_head: str = GPU, embed: str | None = None, dtype: str = "fp16",
                   solver: str = "hand") -> Placement:
    n = spec.n_layers
    return Placement(
        solver=solver, model=spec.name, hardware="test", weight_dtype=dtype, context=512,
        neurons_per_layer=spec.neurons_per_layer,
        gpu_neurons=[np.asarray(ids, dtype=np.int64) for ids in gpu_ids],
        attn_device=[attn] * n, kv_device=[attn] * n, predictor_device=[attn] * n,
        embed_device=embed or lm_head, lm_head_device=lm_head,
        min_gpu_neurons=np.zeros(n, dtype=np.int64), gpu=DeviceBytes(), cpu=DeviceBytes(),
    )


def make_profile(spec: ModelSpec, masks: list[np.ndarray]) -> ActivationProfile:
    """masks[l]: bool [tokens, neurons] trace of layer l."""
    layers = []
    for i, m in enumerate(masks):
        m = np.asarray(m, dtype=bool)
        layers.append(LayerProfile(index=i, counts=m.sum(0).astype(np.int64), n_tokens=m.shape[0],
                                   token_active=m.mean(1).astype(np.float32),
                                   trace=pack_masks(m)))
    return ActivationProfile(model=spec.name, source="measured", dataset="test",
                             n_tokens=masks[0].shape[0], layers=layers)


def zero_overhead_config(**kwargs) -> SimulatorConfig:
    """No launch / operator overheads: times are pure rooflines."""
    zero = OpCounts(attention=0, predictor=0, ffn_dense=0, ffn_sparse=0, lm_head=0)
    return SimulatorConfig(gpu_ops=zero, cpu_ops=OpCounts(**vars(zero)), cpu_op_us=0.0,
                          **kwargs)


def opt_model(d_model=32, d_ffn=128, layers=2, seed=0):
    """A random-init OPT (ReLU fc1/fc2) small enough for the CPU."""
    import torch
    from transformers import OPTConfig, OPTForCausalLM

    torch.manual_seed(seed)
    cfg = OPTConfig(vocab_size=64, hidden_size=d_model, ffn_dim=d_ffn, num_hidden_layers=layers,
                    num_attention_heads=4, max_position_embeddings=64,
                    word_embed_proj_dim=d_model, dropout=0.0, init_std=0.2)
    return OPTForCausalLM(cfg).eval()


def llama_model(d_model=32, d_ffn=96, layers=2, seed=0):
    """A random-init LLaMA with ReLU gates (ReGLU)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=64, hidden_size=d_model, intermediate_size=d_ffn,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=64, hidden_act="relu")
    return LlamaForCausalLM(cfg).eval()
