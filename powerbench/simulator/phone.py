"""`simulator=phone`: the cost model on a phone, with the FFN partly in flash.

    decode   the per-token cost model (powerbench.simulator.cost) on the CPU clusters the
             plan assigns (PhonePlacement.cores: their sustained FLOP/s, CPU-only DRAM
             bandwidth; an I/O core taken from them is lost to the FFN of layers with
             reads only, CorePlan.io_flops); per layer, the flash reads of the computed neurons that are not
             resident (flash_tier.replay on the profile's per-token traces through the
             plan's cache policy; MoE: only routed experts' neurons are computed, so only
             they are read). FFN time per layer:
                 pipeline      max(compute, reads) + one read's latency
                 no pipeline   compute + reads
    prefill  one dense pass of P x B rows on `prefill_unit`:
                 t_layer = max(FLOPs / rate, DRAM bytes / unit bandwidth,
                               flash bytes / sequential 512 KB flash bandwidth,
                               (DRAM + flash bytes) / CPU+NPU DRAM bandwidth  [npu only])
             npu: rate = the profile's sustained NPU rate (units.npu.effective_tflops),
             NPU-only DRAM bandwidth, one graph launch per layer; cpu: every core's
             sustained FLOP/s, CPU-only bandwidth. The
             flash bytes: the prompt's computed neurons that miss the plan's cache state
             after the warm tokens (flash_tier.replay's prompt pass); mmap (llama.cpp):
             brought in by page faults (flash_tier.mmap_bandwidth), not at 512 KB.
decode on the NPU (simulator.decode_unit=npu, QNN): the same per-token cost model, dense,
             on the NPU (its sustained rate, NPU-only bandwidth x npu_decode_efficiency);
             every weight must be resident: a plan with flash is recorded as infeasible.
MoE: predictors are per expert; a token runs (and reads) those of its routed experts only.
A placement without a flash plan (everything in DRAM) is simulated the same way, with no
reads. Metric names as `simulate` plus sim_flash_* (README-style table in notes/phone.md).
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from powerbench.hardware.flash_rates import LARGE_BLOCK, FlashRates
from powerbench.hardware.hardware_profile import HardwareProfile
from powerbench.hardware.load import load_hardware
from powerbench.model.spec import ModelSpec
from powerbench.profiling.activation_profile import ActivationProfile, unpack_masks
from powerbench.simulator.config import ComputeMode
from powerbench.simulator.cost import CostModel, PassCosts, PassShape
from powerbench.simulator.flash_tier import (
    FlashTraffic,
    first_read_seconds,
    flash_seconds,
    mmap_bandwidth,
    replay,
)
from powerbench.simulator.phone_config import PhoneSimConfig, PhoneUnit
from powerbench.simulator.rates import CPU, DeviceRates, _unit_flops
from powerbench.simulator.result import SimResult, breakdown_frame
from powerbench.simulator.simulate import _work, bench_lengths, predictor_inputs
from powerbench.simulator.workload import _moe_routed, token_groups
from powerbench.solver.flash_plan import FlashPlan, FlashPolicy
from powerbench.solver.placement import Placement


def computed_masks(spec: ModelSpec, profile: ActivationProfile, mode: ComputeMode,
                   groups: np.ndarray) -> list[np.ndarray]:
    """Per layer bool [passes, neurons]: neurons a pass computes (sparse: the union of its
    rows' active neurons; dense: every neuron, MoE: every neuron of the routed experts)."""
    out = []
    for layer in profile.layers:
        packed = layer.trace_unions(groups)
        if packed is None:
            raise ValueError("the flash tier replays per-token traces: the profile has none")
        union = unpack_masks(packed, layer.n_neurons)
        if mode is ComputeMode.dense:
            union = (_moe_routed(union, spec.n_experts) if spec.n_experts > 1
                     else np.ones_like(union))
        out.append(union)
    return out


def decode_flash(plan: FlashPlan, spec: ModelSpec, profile: ActivationProfile,
                 mode: ComputeMode, batch: int, n_steps: int, offset: int,
                 rates: FlashRates, ratio: np.ndarray, prompt_rows: int = 0,
                 window: int | None = None) -> tuple[FlashTraffic, np.ndarray]:
    """(traffic, read seconds [steps, layers]) of the decode steps from trace token
    `offset` on; reads of predicted false positives are charged by scaling with the
    predicted / true ratio (sparse). `prompt_rows` > 0: the dense prompt pass of the rows
    before `offset` is replayed first (traffic.prefill_bytes). `window`: LLM in a Flash's
    sliding window instead of the plan's cache, filled by the prompt's last tokens."""
    trace = profile.trace_tokens
    groups = token_groups(trace, batch, n_steps, offset)
    masks = computed_masks(spec, profile, mode, groups)
    start = offset - prompt_rows
    warm_n = min(plan.warm_tokens, trace)  # before the prompt (wrapping around the trace)
    warm = None
    if warm_n > 0:
        warm_groups = token_groups(trace, 1, warm_n, start - warm_n)
        warm = [m[:, 0] for m in (computed_masks(spec, profile, mode, warm_groups))]
    prefill = None
    if prompt_rows > 0:
        pre = token_groups(trace, prompt_rows, 1, start)
        prefill = [m[0] for m in computed_masks(spec, profile, ComputeMode.dense, pre)]
    prompt_tokens = None
    if window is not None and prompt_rows > 0:  # per token, as decode computes them
        tail = min(prompt_rows, window)
        prompt_tokens = [m[:, 0] for m in computed_masks(
            spec, profile, mode, token_groups(trace, 1, tail, offset - tail))]
    freq = [layer.frequency for layer in profile.layers]
    traffic = replay(plan, masks, warm, freq, prefill, window, prompt_tokens)
    seconds = flash_seconds(plan, traffic, rates)
    if mode is ComputeMode.sparse:
        seconds = seconds * np.maximum(ratio, 1.0)[None, :]
        traffic.bytes = traffic.bytes * np.maximum(ratio, 1.0)[None, :]
    return traffic, seconds


def npu_rate(hw: HardwareProfile, setting: str) -> float:
    """The NPU's sustained dense rate (ops/s): units.npu.effective_tflops."""
    if hw.gpu is None:
        raise ValueError(f"simulator.{setting}=npu but {hw.name!r} has no accelerator")
    if not hw.gpu.effective_flops:
        raise ValueError(f"simulator.{setting}=npu needs {hw.name!r}'s sustained NPU rate: "
                         "units.npu.effective_tflops")
    return float(hw.gpu.effective_flops)


def npu_decode_rates(cfg: PhoneSimConfig, hw: HardwareProfile) -> DeviceRates:
    """QNN decode: the token's operators on the NPU at its sustained rate and the NPU-only
    bandwidth x npu_decode_efficiency; the measured token time the efficiency comes from
    includes the graph's own overheads, so no per-operator cost is added."""
    return DeviceRates(CPU, hw.bandwidth(hw.gpu) * cfg.npu_decode_efficiency,
                       npu_rate(hw, "decode_unit"), 0.0, False)


def resident_only(cfg: PhoneSimConfig, plan: FlashPlan) -> SimResult:
    """QNN runs the whole model from DRAM: a plan that leaves FFN bytes in flash does not
    run (recorded as infeasible, as a placement that does not fit)."""
    return SimResult(metrics={"sim_feasible": 0.0}, breakdown=pd.DataFrame(),
                     steps=pd.DataFrame(), notes=[
                         f"simulator.decode_unit={cfg.decode_unit.value}: every weight must "
                         f"be in DRAM, the plan reads the FFN from flash ({plan.policy.value}):"
                         " infeasible, nothing simulated"])


def prefill_costs(cfg: PhoneSimConfig, model: CostModel, hw: HardwareProfile,
                  computed: np.ndarray, shape: PassShape, rates: FlashRates | None,
                  plan: FlashPlan | None, flash_bytes: np.ndarray | None) -> PassCosts:
    """Dense prompt pass on the NPU or the CPU (module docstring). computed: [layers];
    flash_bytes [layers]: what the pass reads from flash (None: nothing)."""
    spec = model.spec
    npu = cfg.prefill_unit is PhoneUnit.npu
    if npu:
        rate, bw = npu_rate(hw, "prefill_unit"), hw.bandwidth(hw.gpu)
    else:
        rate, bw = _unit_flops(hw.cpu), hw.bandwidth(hw.cpu)
    both = hw.memory_of(hw.cpu).extra.get("both_gb_s")
    both_bw = both * 1e9 if both else hw.memory_of(hw.cpu).effective_bw
    flash_bw = np.inf
    if plan is not None and rates is not None:  # mmap: the prompt's page faults
        flash_bw = (mmap_bandwidth(plan, rates) if plan.policy is FlashPolicy.mmap
                    else rates.bandwidth(LARGE_BLOCK, random=False, core=plan.io_core))
    rows = shape.rows
    flops = (2.0 * spec.attn_params_per_layer * rows
             + 4.0 * spec.n_heads * spec.head_dim * shape.score_pairs
             + 2.0 * spec.params_per_neuron * computed * rows)
    ffn_bytes = computed * model.neuron_bytes
    from_flash = (np.minimum(flash_bytes, ffn_bytes) if flash_bytes is not None
                  else 0.0 * ffn_bytes)
    dram = (model.attn_bytes + ffn_bytes - from_flash
            + 2 * shape.kv_tokens * model.kv_token_bytes)  # K, V written and read
    t = np.maximum.reduce([np.broadcast_to(flops / rate, computed.shape),
                           dram / bw, from_flash / flash_bw,
                           (dram + from_flash) / both_bw if npu else 0.0 * dram])
    unit = "npu" if npu else CPU
    layer = {f"prefill_layer@{unit}": t[None, :],
             "launch": np.full((1, spec.n_layers), hw.launch_s if npu else 0.0)}
    head = 2.0 * spec.vocab_size * spec.d_model * shape.out_rows
    token = {f"lm_head@{unit}": np.array([max(head / rate, model.lm_head_bytes / bw)])}
    return PassCosts(layer=layer, token=token,
                     bytes_read={CPU: np.array([float(dram.sum() + from_flash.sum())])})


def simulate_phone(cfg: PhoneSimConfig | None, spec: ModelSpec, profile: ActivationProfile,
                   placement: Placement, hardware: HardwareProfile | Any,
                   predictors: Any | None = None, bench: Any | None = None,
                   cache_dir: str | os.PathLike | None = None) -> SimResult:
    """`simulate` on a phone (cache_dir: as simulate's)."""
    cfg = cfg if cfg is not None else PhoneSimConfig()
    hw = load_hardware(hardware, cache_dir=cache_dir)
    prompt, new, batch = bench_lengths(bench)
    sparse = cfg.mode is ComputeMode.sparse
    pred_bytes, ratio, pred_source = predictor_inputs(cfg, spec, placement, predictors)
    model = CostModel(spec, placement, hw, cfg, pred_bytes if sparse else None)
    if sparse and spec.n_experts > 1:  # MoE: per-expert predictors, only the routed run
        model.predictor_bytes = model.predictor_bytes * spec.experts_per_token / spec.n_experts
    plan: FlashPlan | None = getattr(placement, "flash", None)
    cores = getattr(placement, "cores", None)
    if cfg.decode_unit is PhoneUnit.npu:  # QNN: the whole token on the NPU, all resident
        if plan is not None:
            return resident_only(cfg, plan)
        model.dev[CPU], cores = npu_decode_rates(cfg, hw), None
    if cores is not None:  # decode on the plan's CPU clusters (the I/O core computes too
        # outside the FFN's reads; below)
        model.dev[CPU] = replace(model.dev[CPU], flops=cores.compute_flops + cores.io_flops)
    rates = FlashRates.from_hardware(hw) if plan is not None else None
    notes = [f"simulated {cfg.mode.value} compute of {spec.name} ({placement.weight_dtype}) "
             f"planned by {placement.solver} on {hw.name}; FFN "
             f"{'partly in flash (' + plan.policy.value + ')' if plan else 'all in DRAM'}; "
             f"{'' if cfg.window_tokens is None else f'sliding window of the last {cfg.window_tokens} tokens; '}"
             f"prefill on the {cfg.prefill_unit.value}, decode on the "
             f"{cfg.decode_unit.value}; pipeline {cfg.pipeline}; "
             f"predictors from {pred_source}"]

    rows = prompt * batch
    n_steps = new - 1
    offset = cfg.trace_offset + rows
    traffic, io = None, None
    if plan is not None:  # the prompt pass and the decode steps through the cache policy
        traffic, io = decode_flash(plan, spec, profile, cfg.mode, batch, n_steps, offset,
                                   rates, ratio, prompt_rows=rows, window=cfg.window_tokens)
    pre_work, n1 = _work(spec, profile, placement, ComputeMode.dense, rows, 1,
                         cfg.trace_offset, ratio)
    pre = prefill_costs(cfg, model, hw, pre_work.cpu_computed[0] + pre_work.gpu_computed[0],
                        PassShape.prefill(prompt, batch), rates, plan,
                        traffic.prefill_bytes if traffic is not None else None)
    prefill_s = float(pre.total.sum())
    metrics: dict[str, float] = {
        "sim_prefill_tokens_per_s": rows / prefill_s, "sim_prefill_ms": prefill_s * 1e3,
        "sim_prefill_npu": float(cfg.prefill_unit is PhoneUnit.npu),
        "sim_flash_resident_ffn_share": float(getattr(placement, "resident_ffn_share", 1.0)),
    }
    frames = [breakdown_frame("prefill", pre)]
    notes += n1
    if traffic is not None and traffic.prefill_bytes is not None:
        metrics["sim_prefill_flash_bytes"] = float(traffic.prefill_bytes.sum())
    decode_s = 0.0
    steps = pd.DataFrame()
    if n_steps > 0:
        work, n2 = _work(spec, profile, placement, cfg.mode, batch, n_steps, offset, ratio)
        notes += n2
        context = prompt + np.arange(1, n_steps + 1)
        dec = model.forward(work, PassShape.decode(context, batch))
        if traffic is not None and cores is not None and cores.io_flops > 0:
            # an I/O core taken from the compute set: the FFN of a layer with reads runs
            # without it (the reads are in flight), the rest of the token with it
            full = model.dev[CPU]
            model.dev[CPU] = replace(full, flops=cores.compute_flops)
            during = model.forward(work, PassShape.decode(context, batch))
            model.dev[CPU] = full
            with_reads = io > 0
            for key, parts, src in (("ffn", dec.layer, during.layer),
                                    ("ffn@cpu", dec.busy, during.busy)):
                if key in parts:
                    parts[key] = np.where(with_reads, src[key], parts[key])
        if traffic is None:
            io = np.zeros_like(dec.layer["ffn"])
        else:
            hits = traffic.hit_rates()
            metrics |= {"sim_flash_bytes_per_token": float(traffic.bytes.sum(axis=1).mean()
                                                            / batch),
                        "sim_flash_reads_per_token": float(traffic.reads.sum(axis=1).mean()
                                                            / batch),
                        "sim_flash_hit_rate": hits["hit"], "sim_flash_hit_rate_hot": hits["hot"],
                        "sim_flash_hit_rate_lru": hits["lru"]}
        ffn = dec.layer["ffn"]
        if cfg.pipeline:
            first = first_read_seconds(plan, rates) if plan is not None else 0.0
            eff = np.maximum(ffn, io) + np.where(io > 0, first, 0.0)
        else:
            eff = ffn + io
        dec.layer["flash_wait"] = eff - ffn
        dec.busy["flash_io"] = io
        step_s = dec.total
        decode_s = float(step_s.sum())
        frames.append(breakdown_frame("decode", dec))
        steps = pd.DataFrame({"step": np.arange(1, n_steps + 1), "context": context,
                              "seconds": step_s, "flash_s": io.sum(axis=1),
                              "ffn_compute_s": ffn.sum(axis=1)})
        metrics |= {
            "sim_decode_tokens_per_s": n_steps * batch / decode_s,
            "sim_decode_ms": decode_s * 1e3,
            "sim_decode_latency_ms_p50": float(np.percentile(step_s, 50) * 1e3),
            "sim_decode_latency_ms_p90": float(np.percentile(step_s, 90) * 1e3),
            "sim_flash_ms_per_token": float(io.sum(axis=1).mean() * 1e3),
            "sim_flash_io_bound_share": float((io > ffn).mean()),
            "sim_cpu_bytes_per_step": float(dec.bytes_read[CPU].mean()),
        }
    metrics["sim_end_to_end_tokens_per_s"] = new * batch / (prefill_s + decode_s)
    return SimResult(metrics=metrics, breakdown=pd.concat(frames, ignore_index=True),
                     steps=steps, notes=notes)
