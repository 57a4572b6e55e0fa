"""The output projection kept on the host (`solver.lm_head_on_gpu=false`), as PowerInfer's
public OPT path does (build_opt multiplies by the token embedding, which its loader never
offloads): the VRAM it would take goes to FFN neurons, and every token reads it on the CPU."""

from __future__ import annotations

import numpy as np
import pytest

from powerbench.config.schema import BenchConfig
from powerbench.simulator import simulate
from powerbench.solver import solve
from powerbench.solver.config import ILPConfig
from powerbench.solver.placement import CPU, GPU

from .factories import GB, make_hardware, make_profile, make_spec, zero_overhead_config

SPEC = make_spec(n_layers=2, d_model=64, d_ffn=256, vocab=100)
LM_HEAD_BYTES = 100 * 64 * 2  # vocab x d_model, fp16: 12.8 kB = 50 neurons of 256 B
NEURON_BYTES = 2 * 64 * 2  # a ReLU neuron: a row of up and a column of down, fp16
ATTN_BYTES = 4 * 64 * 64 * 2  # q, k, v, o
KV_BYTES = 2 * 64 * 2 * 8  # k and v rows of 8 context tokens, fp16


def _solve(lm_head_on_gpu: bool, hw, profile):
    cfg = ILPConfig(gpu_buffer_gb=0.0, cpu_buffer_gb=0.0, predictor_hidden=0, context=8,
                    lm_head_on_gpu=lm_head_on_gpu, group_size=1, mip_gap=1e-9)
    return solve(cfg, SPEC, profile, hw)


def test_output_on_host_frees_its_vram_for_neurons_and_is_read_on_the_cpu():
    rng = np.random.default_rng(0)
    profile = make_profile(SPEC, [rng.random((32, 256)) < 0.2 for _ in range(2)])
    # the GPU holds both attention layers, their KV cache, the output projection and 100
    # neurons; the FFN (512 neurons) does not fit. No synchronisation cost, so the ILP's
    # per-layer minimum C_l is 0 and any neuron it can fit goes to the GPU
    capacity = 2 * (ATTN_BYTES + KV_BYTES) + LM_HEAD_BYTES + 100 * NEURON_BYTES
    hw = make_hardware(cpu_bw=10 * GB, gpu_bw=100 * GB, gpu_capacity=capacity, sync_s=0.0)
    on_gpu, on_host = _solve(True, hw, profile), _solve(False, hw, profile)
    assert on_gpu.lm_head_device == GPU and on_host.lm_head_device == CPU
    assert on_gpu.gpu.ffn == pytest.approx(100 * NEURON_BYTES)
    assert on_host.gpu.ffn == pytest.approx(150 * NEURON_BYTES)  # + the output's 50 neurons
    assert on_host.cpu.embeddings == pytest.approx(LM_HEAD_BYTES)
    # each decode token reads the 12.8 kB projection at the host's 10 GB/s: 1.28 us
    bench = BenchConfig(prompt_tokens=4, new_tokens=3, batch_size=1)
    result = simulate(zero_overhead_config(), SPEC, profile, on_host, hw, bench=bench)
    rows = result.breakdown[result.breakdown.phase == "decode"]
    lm_head = rows[rows.component == "lm_head"]
    assert set(lm_head.device) == {CPU}
    assert lm_head.seconds.sum() == pytest.approx(2 * LM_HEAD_BYTES / (10 * GB))  # 2 steps
