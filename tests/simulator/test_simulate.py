"""simulate(): baselines, dtypes, batch union, metric identities, breakdown."""

from __future__ import annotations

import numpy as np
import pytest

from powerbench.config.schema import BenchConfig
from powerbench.model.spec import ModelSpec, SparsityStats
from powerbench.profiling.synthetic import synthetic_profile
from powerbench.simulator import ComputeMode, simulate
from powerbench.simulator.workload import ffn_work, token_groups
from powerbench.solver import solve
from powerbench.solver.config import AllCPUConfig, AllGPUConfig, LayerOffloadConfig
from powerbench.solver.placement import CPU

from .factories import (
    GB,
    make_hardware,
    make_placement,
    make_profile,
    make_spec,
    zero_overhead_config,
)


def _random_profile(spec, tokens=32, p=0.1, seed=0):
    rng = np.random.default_rng(seed)
    return make_profile(spec, [rng.random((tokens, spec.neurons_per_layer)) < p
                               for _ in range(spec.n_layers)])


def _bench(prompt=8, new=9, batch=1):
    return BenchConfig(prompt_tokens=prompt, new_tokens=new, batch_size=batch)


def test_int4_reads_18_32_of_a_byte_per_weight_vs_2_for_fp16():
    spec = make_spec(n_layers=2)
    hw = make_hardware(gpu_bw=None)  # CPU only: every part is bandwidth-bound on one device
    profile = _random_profile(spec)
    cfg = zero_overhead_config(mode=ComputeMode.dense, kv_bytes_per_value=0.0)
    times = {}
    for dtype in ("fp16", "int4"):
        placement = make_placement(spec, [np.arange(0)] * 2, attn=CPU, lm_head=CPU, dtype=dtype)
        result = simulate(cfg, spec, profile, placement, hw, bench=_bench())
        times[dtype] = result.metrics["sim_decode_ms"]
        per_step = result.steps.cpu_bytes.iloc[0]
        weights = 2 * (spec.attn_params_per_layer + spec.ffn_params_per_layer) \
            + spec.vocab_size * spec.d_model + spec.d_model  # layers, lm_head, one embedding row
        assert per_step == pytest.approx(weights * {"fp16": 2.0, "int4": 18 / 32}[dtype])
    assert times["int4"] / times["fp16"] == pytest.approx((18 / 32) / 2.0)


def _dense_step_seconds(spec, bw, context, wb=2.0):
    """Hand formula: everything read once at `bw` (fp16 KV cache)."""
    kv = 2 * spec.n_kv_heads * spec.head_dim * 2.0 * context
    layer = spec.attn_params_per_layer * wb + kv + spec.ffn_params_per_layer * wb
    return (spec.n_layers * layer + spec.vocab_size * spec.d_model * wb + spec.d_model * wb) / bw


def test_llamacpp_baseline_equals_dense_time_on_one_device():
    spec = make_spec(n_layers=3)
    profile = _random_profile(spec)
    cfg = zero_overhead_config(mode=ComputeMode.dense)
    bench = _bench(prompt=4, new=2)  # one decode step at context 5
    # every layer fits on the GPU: layer offload == all on the GPU == the hand formula
    hw = make_hardware(sync_s=0.0)
    offload = solve(LayerOffloadConfig(gpu_buffer_gb=0.0, cpu_buffer_gb=0.0), spec, profile, hw)
    assert offload.gpu_layers == spec.n_layers
    all_gpu = solve(AllGPUConfig(gpu_buffer_gb=0.0, cpu_buffer_gb=0.0), spec, profile, hw)
    t_offload = simulate(cfg, spec, profile, offload, hw, bench=bench).metrics["sim_decode_ms"]
    t_gpu = simulate(cfg, spec, profile, all_gpu, hw, bench=bench).metrics["sim_decode_ms"]
    assert t_offload == pytest.approx(t_gpu)
    logits_to_host = 100 * 4 / GB  # sync_s = 0 here
    assert t_gpu == pytest.approx((_dense_step_seconds(spec, 100 * GB, 5) + logits_to_host) * 1e3)
    # no layer on the GPU: layer offload == all on the CPU == the hand formula
    hw = make_hardware()
    none = solve(LayerOffloadConfig(n_gpu_layers=0), spec, profile, hw)
    all_cpu = solve(AllCPUConfig(), spec, profile, hw)
    t_none = simulate(cfg, spec, profile, none, hw, bench=bench).metrics["sim_decode_ms"]
    t_cpu = simulate(cfg, spec, profile, all_cpu, hw, bench=bench).metrics["sim_decode_ms"]
    assert t_none == pytest.approx(t_cpu)
    assert t_cpu == pytest.approx(_dense_step_seconds(spec, 10 * GB, 5) * 1e3)


def test_layer_offload_pays_one_sync_and_transfer_per_boundary():
    spec = make_spec(n_layers=4)
    profile = _random_profile(spec)
    hw = make_hardware(sync_s=1e-3)
    cfg = zero_overhead_config(mode=ComputeMode.dense)
    half = solve(LayerOffloadConfig(n_gpu_layers=2, lm_head_on_gpu=False), spec, profile, hw)
    result = simulate(cfg, spec, profile, half, hw, bench=_bench(new=2))
    rows = result.breakdown[(result.breakdown.phase == "decode")]
    transition = rows[rows.component == "transition"].seconds.sum()
    out = rows[rows.component == "transition_out"].seconds.sum()
    # CPU layers 0-1 -> GPU layers 2-3 -> output projection back on the CPU: two switches
    assert transition == pytest.approx(1e-3 + 64 * 2 / GB)
    assert out == pytest.approx(1e-3 + 64 * 2 / GB)


def _synthetic(n_layers=2, d_ffn=1024):
    spec = ModelSpec(name="syn", n_layers=n_layers, d_model=64, d_ffn=d_ffn, n_heads=4,
                     n_kv_heads=4, ffn_kind="relu", vocab_size=100, max_positions=1024,
                     stats=SparsityStats(token_sparsity=0.9, block_skew=0.3, model_skew=0.25))
    return spec, synthetic_profile(spec, trace_tokens=64, seed=0, n_tokens=10_000)


def test_batch_union_grows_sublinearly():
    spec, profile = _synthetic()
    placement = make_placement(spec, [np.arange(300)] * spec.n_layers)
    means = {}
    for batch in (1, 4, 16):
        groups = token_groups(64, batch, 64 // batch)
        work = ffn_work(spec, profile, placement, ComputeMode.sparse, groups, batch)
        means[batch] = float((work.gpu_active + work.cpu_active).mean())
    assert means[1] < means[4] < means[16]
    assert means[4] < 4 * means[1] and means[16] < 4 * means[4]  # shared (hot) neurons
    # per-step time grows with the union, tokens/s per row-step grows with the batch
    hw = make_hardware()
    tps = [simulate(zero_overhead_config(), spec, profile, placement, hw,
                    bench=_bench(new=17, batch=b)).metrics["sim_decode_tokens_per_s"]
           for b in (1, 4)]
    assert tps[1] > tps[0]


def test_metric_identities_and_breakdown_sums():
    spec, profile = _synthetic()
    placement = make_placement(spec, [np.arange(300)] * spec.n_layers)
    hw = make_hardware(launch_s=4e-6)
    bench = _bench(prompt=40, new=20)
    r = simulate(None, spec, profile, placement, hw, bench=bench)
    m = r.metrics
    total_s = (m["sim_prefill_ms"] + m["sim_decode_ms"]) / 1e3
    assert m["sim_end_to_end_tokens_per_s"] == pytest.approx(20 / total_s)
    assert m["sim_decode_tokens_per_s"] == pytest.approx(19 / (m["sim_decode_ms"] / 1e3))
    assert m["sim_prefill_tokens_per_s"] == pytest.approx(40 / (m["sim_prefill_ms"] / 1e3))
    assert m["sim_prefill_dense_gpu"] == 1.0  # 40 rows >= 32: dense on the GPU
    for phase, key in (("prefill", "sim_prefill_ms"), ("decode", "sim_decode_ms")):
        rows = r.breakdown[(r.breakdown.phase == phase) & r.breakdown.critical_path]
        assert rows.seconds.sum() * 1e3 == pytest.approx(m[key])
    assert len(r.steps) == 19
    assert r.steps.seconds.sum() * 1e3 == pytest.approx(m["sim_decode_ms"])
    # ids 0..299 of a shuffled synthetic profile: a share of the load, not all or none
    assert 0.0 < m["sim_gpu_neuron_load_share"] < 1.0


def test_per_token_variance_follows_the_trace():
    spec = make_spec()
    masks = np.zeros((4, 256), dtype=bool)
    for t, k in enumerate((5, 50, 5, 50)):
        masks[t, 128:128 + k] = True  # CPU neurons only
    profile = make_profile(spec, [masks])
    placement = make_placement(spec, [np.arange(128)])
    r = simulate(zero_overhead_config(trace_offset=0), spec, profile, placement,
                 make_hardware(), bench=_bench(prompt=1, new=5))
    # prompt uses trace token 0; decode steps replay tokens 1, 2, 3, 0
    assert list(r.steps.cpu_active_neurons) == [50, 5, 50, 5]
    assert r.steps.seconds.iloc[0] > r.steps.seconds.iloc[1]
    assert r.metrics["sim_decode_latency_ms_p90"] > r.metrics["sim_decode_latency_ms_p50"]


def test_profile_without_trace_uses_expected_union():
    spec = make_spec()
    profile = make_profile(spec, [np.random.default_rng(1).random((50, 256)) < 0.2])
    for layer in profile.layers:
        layer.trace = None
    placement = make_placement(spec, [np.arange(128)])
    work = ffn_work(spec, profile, placement, ComputeMode.sparse, None, rows=3)
    p = profile.layers[0].frequency
    assert work.cpu_active[0, 0] == pytest.approx((1 - (1 - p[128:]) ** 3).sum())
    r = simulate(zero_overhead_config(), spec, profile, placement, make_hardware(),
                 bench=_bench())
    assert any("no per-token traces" in n for n in r.notes)


def test_placement_on_a_gpu_the_hardware_lacks_fails():
    spec = make_spec()
    with pytest.raises(ValueError, match="has none"):
        simulate(None, spec, _random_profile(spec), make_placement(spec, [np.arange(10)]),
                 make_hardware(gpu_bw=None), bench=_bench())


def test_dense_prefill_mode_computes_every_neuron_from_its_row_threshold():
    from dataclasses import replace

    from powerbench.simulator.config import PrefillConfig, PrefillMode

    spec = make_spec(n_layers=2)
    profile = _random_profile(spec, tokens=64, p=0.05)
    hw = make_hardware(gpu_bw=None)
    placement = solve(AllCPUConfig(), spec, profile, hw)
    sparse = zero_overhead_config(mode=ComputeMode.sparse)

    def prefill_ms(cfg, prompt):
        return simulate(cfg, spec, profile, placement, hw,
                        bench=_bench(prompt=prompt, new=2)).metrics["sim_prefill_ms"]

    dense_cfg = replace(sparse, mode=ComputeMode.dense)
    dense_prompts = replace(sparse, prefill=PrefillConfig(mode=PrefillMode.dense,
                                                          gpu_min_tokens=16))
    hybrid = replace(sparse, prefill=PrefillConfig(mode=PrefillMode.hybrid))
    # from 16 rows the prompt costs what the dense engine's does, below it the sparse union
    assert prefill_ms(dense_prompts, 16) == pytest.approx(prefill_ms(dense_cfg, 16))
    assert prefill_ms(dense_prompts, 8) == pytest.approx(prefill_ms(hybrid, 8))
    assert prefill_ms(hybrid, 16) != pytest.approx(prefill_ms(dense_cfg, 16))  # it matters


def test_neuron_load_counts_every_weight_row_as_papers_fig12_ffn_share_separately():
    """Attention and the output projection on the GPU, every FFN neuron on the CPU, dense
    compute: the GPU's share of the weight rows is hand-computable; its FFN share is 0."""
    spec = make_spec(n_layers=2)
    profile = _random_profile(spec)
    placement = make_placement(spec, [np.arange(0)] * 2)  # no FFN neuron on the GPU
    cfg = zero_overhead_config(mode=ComputeMode.dense)
    m = simulate(cfg, spec, profile, placement, make_hardware(), bench=_bench()).metrics
    gpu = 2 * spec.attn_params_per_layer + spec.vocab_size * spec.d_model
    cpu = 2 * spec.neurons_per_layer * spec.params_per_neuron
    assert m["sim_gpu_neuron_load_share"] == pytest.approx(gpu / (gpu + cpu))
    assert m["sim_gpu_ffn_load_share"] == 0.0


def test_work_cache_recosts_other_efficiencies_exactly():
    """simulate(work_cache=...): the FFN work is kept across calls that change only the
    kernel efficiencies (experiments/fit_efficiency.py), with the uncached result."""
    from dataclasses import replace

    from powerbench.simulator.config import KernelEfficiency, SimulatorConfig

    spec, profile = _synthetic()
    placement = make_placement(spec, [np.arange(300)] * spec.n_layers)
    hw = make_hardware(launch_s=4e-6)
    cache: dict = {}
    for gpu_dense, gpu_sparse in ((1.0, 1.0), (0.5, 0.3), (1.0, 1.0)):
        cfg = replace(SimulatorConfig(), efficiency=KernelEfficiency(
            gpu_dense=gpu_dense, gpu_sparse=gpu_sparse))
        cached = simulate(cfg, spec, profile, placement, hw, bench=_bench(40, 20),
                          work_cache=cache)
        fresh = simulate(cfg, spec, profile, placement, hw, bench=_bench(40, 20))
        assert cached.metrics == fresh.metrics
    assert set(cache) == {"prefill|overlap=[]", "decode|overlap=[]"}
    # the token overlap changes the FFN work: its own cache entries, and the same result
    # as a fresh run
    from powerbench.simulator.config import TokenOverlapConfig

    cfg = replace(SimulatorConfig(), token_overlap=TokenOverlapConfig([0.1], [0.3]))
    cached = simulate(cfg, spec, profile, placement, hw, bench=_bench(40, 20), work_cache=cache)
    fresh = simulate(cfg, spec, profile, placement, hw, bench=_bench(40, 20))
    assert cached.metrics == fresh.metrics and len(cache) == 4


def test_a_hardware_config_is_loaded_from_the_callers_cache_dir(tmp_path, monkeypatch):
    """solve / simulate / simulate_phone given a hardware config (not a loaded profile) load
    it with the caller's cache_dir: a `local` profile is measured and cached where the run's
    cache is, not in the default cache."""
    import powerbench.hardware.load as load
    from powerbench.hardware.config import LocalHardwareConfig
    from powerbench.simulator.phone import simulate_phone

    seen = []

    def fake_build(cfg, cache_dir=None):
        seen.append(cache_dir)
        return make_hardware()

    monkeypatch.setattr(load, "build", fake_build)
    spec = make_spec()
    profile = _random_profile(spec)
    placement = solve(AllCPUConfig(), spec, profile, LocalHardwareConfig(), cache_dir=tmp_path)
    simulate(None, spec, profile, placement, LocalHardwareConfig(), bench=_bench(),
             cache_dir=tmp_path)
    simulate_phone(None, spec, profile, placement, LocalHardwareConfig(), bench=_bench(),
                   cache_dir=tmp_path)
    assert seen == [tmp_path] * 3


def test_side_counts_match_counting_the_bools():
    """The popcount of bit-packed rows, on a neuron count that is not a multiple of 8."""
    from powerbench.profiling.activation_profile import pack_masks
    from powerbench.simulator.workload import _side_counts

    rng = np.random.default_rng(0)
    mask, gpu = rng.random((5, 1001)) < 0.3, rng.random(1001) < 0.4
    on_gpu, on_cpu = _side_counts(pack_masks(mask), pack_masks(gpu))
    assert np.array_equal(on_gpu, (mask & gpu).sum(axis=1))
    assert np.array_equal(on_cpu, (mask & ~gpu).sum(axis=1))
