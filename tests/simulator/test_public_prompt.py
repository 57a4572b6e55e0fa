"""PowerInfer's public prompt operators (prefill.mode=powerinfer_public) on a hand-computed
one-layer case: a toy ReLU spec (up + down, 64-wide: 256 B per fp16 neuron), GPU neurons
0-127, CPU neurons 128-255, a 4-token prompt in which every token activates the same 10
neurons on each device (union 10, pairs 40 per device)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from powerbench.config.schema import BenchConfig
from powerbench.schema_helpers import ConfigRangeError
from powerbench.simulator.config import (
    ComputeMode,
    PrefillConfig,
    PrefillMode,
    PublicPromptReads,
    WeightReads,
)
from powerbench.simulator.cost import CostModel, PassShape
from powerbench.simulator.public_prompt import public_prompt_work
from powerbench.simulator.simulate import simulate
from powerbench.simulator.workload import ffn_work, token_groups

from .factories import (
    GB,
    make_hardware,
    make_placement,
    make_profile,
    make_spec,
    zero_overhead_config,
)

NEURON_B = 2 * 64 * 2
PROMPT = 4


def _case():
    spec = make_spec()
    placement = make_placement(spec, [np.arange(128)])
    mask = np.zeros((PROMPT, 256), dtype=bool)
    mask[:, :10] = True  # GPU: the same 10 neurons for every token
    mask[:, 128:138] = True  # CPU: likewise
    profile = make_profile(spec, [mask])
    work = ffn_work(spec, profile, placement, ComputeMode.sparse,
                    token_groups(PROMPT, PROMPT, 1), rows=PROMPT, token_skip=True)
    return spec, placement, profile, work


def test_each_operator_reads_once_or_per_token_as_the_public_code():
    spec, placement, _, work = _case()
    assert (work.gpu_computed[0, 0], work.gpu_token_computed[0, 0]) == (10, 40)
    public = public_prompt_work(work, spec, placement, PROMPT, PublicPromptReads())
    # CPU: up once (10 rows), down per token (40): half a neuron each
    assert public.cpu_computed[0, 0] == pytest.approx(0.5 * 10 + 0.5 * 40)
    # GPU: both per (row, token) pair
    assert public.gpu_computed[0, 0] == pytest.approx(40)
    # FLOPs unchanged below the GEMM threshold; the union each device holds unchanged
    assert public.gpu_token_computed[0, 0] == 40 and public.cpu_token_computed[0, 0] == 40
    assert public.gpu_active[0, 0] == 10


def test_every_operator_once_is_the_hybrid_prompt():
    spec, placement, _, work = _case()
    once = PublicPromptReads(*(WeightReads.once,) * 4)
    public = public_prompt_work(work, spec, placement, PROMPT, once)
    assert public.gpu_computed[0, 0] == 10 and public.cpu_computed[0, 0] == 10


def test_long_prompt_runs_the_gpu_down_projection_as_one_fp32_gemm():
    spec, placement, _, work = _case()
    reads = PublicPromptReads(gpu_down_gemm_above_rows=PROMPT - 1)
    public = public_prompt_work(work, spec, placement, PROMPT, reads)
    # up per pair (40) + all 128 GPU down rows read as fp16, written and read as fp32
    assert public.gpu_computed[0, 0] == pytest.approx(0.5 * 40 + 0.5 * 128 * (2 + 8) / 2)
    assert public.gpu_token_computed[0, 0] == pytest.approx(0.5 * 40 + 0.5 * 128 * PROMPT)


def test_device_times_charge_the_reads():
    spec, placement, _, work = _case()
    hw = make_hardware(cpu_bw=10 * GB, gpu_bw=100 * GB)
    model = CostModel(spec, placement, hw, zero_overhead_config(), predictor_bytes=np.zeros(1))
    public = public_prompt_work(work, spec, placement, PROMPT, PublicPromptReads())
    costs = model.forward(public, PassShape.prefill(PROMPT, 1))
    assert costs.busy["ffn@gpu"][0, 0] == pytest.approx(40 * NEURON_B / (100 * GB))
    assert costs.busy["ffn@cpu"][0, 0] == pytest.approx(25 * NEURON_B / (10 * GB))


def test_simulate_uses_it_for_the_prompt_only():
    spec, placement, profile, _ = _case()
    hw = make_hardware()
    bench = BenchConfig(prompt_tokens=PROMPT, new_tokens=2, batch_size=1)
    hybrid = zero_overhead_config(token_skip=True, prefill=PrefillConfig(mode=PrefillMode.hybrid))
    public = replace(hybrid, prefill=PrefillConfig(mode=PrefillMode.powerinfer_public))
    a = simulate(hybrid, spec, profile, placement, hw, bench=bench).metrics
    b = simulate(public, spec, profile, placement, hw, bench=bench).metrics
    assert b["sim_prefill_ms"] > a["sim_prefill_ms"]
    assert b["sim_decode_ms"] == pytest.approx(a["sim_decode_ms"])


def test_gemm_threshold_must_be_positive():
    with pytest.raises(ConfigRangeError, match="gpu_down_gemm_above_rows"):
        PublicPromptReads(gpu_down_gemm_above_rows=0)
