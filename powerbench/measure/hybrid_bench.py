"""engine=hybrid on a REAL-SIZE shape (synthetic weights), measured on a GPU + its host CPU.

For one model shape (seeded random weights, `powerbench.engine.synthetic`) and each GPU
share of the FFN bytes in `gpu_ffn_shares`, in interleaved rounds on one machine:

- ``dense (all on GPU)``: our decoder, every projection through cuBLAS (the baseline);
- ``sparse_cuda (all on GPU)``: the neuron-aware CUDA operators on the whole FFN;
- ``hybrid <share>``: PowerInfer's split. The hottest neurons (global top-k by activation
  frequency, k = share of every FFN neuron: what the greedy solver picks when every neuron
  costs the same bytes) on the GPU, the rest on the CPU, both parts computed concurrently
  per layer (`HybridFFN`);
- ``layer offload <share>``: llama.cpp's `-ngl` split of the same bytes: the FFNs of the
  last `share x layers` layers on the GPU, the others on the CPU, every neuron computed
  (dense work through the same operators, `HybridFFN` with `active=dense`).

Attention, KV cache, embeddings and the LM head are on the GPU in every row, so the rows
differ only in where the FFN runs and how much of it is computed. The active sets are the
synthetic activation profile's per-token trace (fitted to the model's published sparsity
and skew), replayed as device masks: a predictor that is exact and free (`ReplayMasks`).
Only speed is meaningful: the tokens of random weights are not.

With a hardware profile (`hardware=`, e.g. the `local` one measured on this machine, GPU
included) every row also gets the cost model's prediction of the same run: its twin (our
engine's operator counts per step, `powerbench.measure.twin`), the same placement, the
same per-token active sets (an exact, free predictor), and the error against the measured
median (`sim_error_pct`). The twin also charges what the engine's host pays per layer,
measured here just before the rows (`powerbench.measure.hybrid_host`): the CPU part's round
trip, the decoder thread's own share of it (in series with its launches), and the host
time of one sparse_cuda call beyond one launch. The host time to issue one call of each
operator class a layer calls is measured too and printed with the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from powerbench.engine.decoder import Decoder
from powerbench.engine.hybrid import HybridFFN
from powerbench.measure.decode_bench import generate_timed, run_decode_bench
from powerbench.measure.harness import Report
from powerbench.model.spec import ModelSpec
from powerbench.solver.placement import GPU, DeviceBytes, Placement

DENSE = "dense (all on GPU)"
SPARSE = "sparse_cuda (all on GPU)"


@dataclass(frozen=True)
class HybridBenchConfig:
    layers: int = 8  # evenly spaced over the model's depth (its mix of hot and cold layers)
    dtype: str = "fp16"
    gpu_ffn_shares: tuple[float, ...] = (0.25, 0.5)
    batch: int = 1
    prompt_tokens: int = 16
    new_tokens: int = 32
    rounds: int = 5
    cpu_threads: int = 8  # torch and sparse_cpu workers for the CPU part
    trace_tokens: int = 256
    seed: int = 0
    # where the hybrid rows run their CPU part (engine.ffn.cpu_part): each is a row
    cpu_parts: tuple[str, ...] = ("worker", "inline")

    def __post_init__(self) -> None:
        from powerbench.engine.config import check_cpu_parts

        bad = [s for s in self.gpu_ffn_shares if not 0.0 < s < 1.0]
        if bad:
            raise ValueError(f"gpu_ffn_shares must lie strictly between 0 and 1, got {bad}")
        check_cpu_parts("cpu_parts", self.cpu_parts)
        if self.new_tokens < 2 or self.rounds < 1 or self.layers < 1:
            raise ValueError("new_tokens >= 2, rounds >= 1 and layers >= 1 are needed")


class ReplayMasks:
    """The profile's per-token active sets as masks already on the GPU (what a predictor
    running there hands the hybrid FFN), built once: the timed loop copies nothing. A call
    of r rows gets the next r trace tokens' masks; the trace advances after the last layer;
    `rewind` restarts it (every round does the same work)."""

    def __init__(self, profile: Any, device: torch.device | str) -> None:
        self.masks = [torch.from_numpy(np.stack(layer.trace_masks())).to(device)
                      for layer in profile.layers]  # per layer: bool [tokens, neurons]
        self.n_layers = len(self.masks)
        self.n_tokens = int(self.masks[0].shape[0])
        self.step = 0

    def rewind(self) -> None:
        self.step = 0

    def predict_mask(self, layer_idx: int, x: Tensor) -> Tensor:
        rows = x.shape[0]
        start = self.step % self.n_tokens
        table = self.masks[layer_idx]
        if start + rows <= self.n_tokens:
            out = table[start:start + rows]
        else:
            idx = (torch.arange(rows, device=table.device) + start) % self.n_tokens
            out = table.index_select(0, idx)
        if layer_idx == self.n_layers - 1:
            self.step += rows
        return out


def _placement(spec: ModelSpec, gpu_ids: list[np.ndarray], solver: str) -> Placement:
    n = spec.n_layers
    return Placement(
        solver=solver, model=spec.name, hardware="local", weight_dtype="fp16",
        context=spec.max_positions, neurons_per_layer=spec.neurons_per_layer,
        gpu_neurons=[np.sort(np.asarray(ids, dtype=np.int64)) for ids in gpu_ids],
        attn_device=[GPU] * n, kv_device=[GPU] * n, predictor_device=[GPU] * n,
        embed_device=GPU, lm_head_device=GPU, min_gpu_neurons=np.zeros(n, dtype=np.int64),
        gpu=DeviceBytes(), cpu=DeviceBytes())


def hot_neuron_placement(spec: ModelSpec, profile: Any, share: float) -> Placement:
    """The `share` x every FFN neuron with the highest activation frequency, over all
    layers at once, on the GPU (ties broken by position, deterministic)."""
    freq = np.stack([np.asarray(layer.frequency, dtype=np.float64) for layer in profile.layers])
    k = int(round(share * freq.size))
    top = np.argsort(-freq, axis=None, kind="stable")[:k]
    per_layer = [top[top // freq.shape[1] == i] % freq.shape[1] for i in range(freq.shape[0])]
    return _placement(spec, per_layer, "hot neurons (greedy)")


def layer_offload_placement(spec: ModelSpec, share: float) -> Placement:
    """llama.cpp's -ngl: whole layers' FFNs, the last round(share x layers) of them."""
    n, width = spec.n_layers, spec.neurons_per_layer
    on_gpu = int(round(share * n))
    ids = [np.arange(width) if i >= n - on_gpu else np.zeros(0, np.int64) for i in range(n)]
    return _placement(spec, ids, "layer offload")


def all_gpu_placement(spec: ModelSpec) -> Placement:
    return _placement(spec, [np.arange(spec.neurons_per_layer)] * spec.n_layers, "all on GPU")


@dataclass(frozen=True)
class BenchEngine:
    """One row's decoder and what the row says about it."""

    name: str  # its name in the decode benchmark ("dense": the baseline)
    decoder: Decoder
    gpu_ffn_share: float = 1.0  # share of the FFN bytes on the GPU (1.0: all on the GPU)
    peer: str | None = None  # the layer-offload engine of the same share (hybrid rows)
    system: str = ""  # the row's name ("": `name`)

    def __post_init__(self) -> None:
        object.__setattr__(self, "system", self.system or self.name)


def hybrid_decoder(weights: Any, spec: ModelSpec, profile: Any, share: float,
                   masks: ReplayMasks | None = None, gpu_backend: str = "sparse_cuda",
                   cpu_backend: str = "sparse_cpu", cpu_part: str = "worker") -> Decoder:
    """PowerInfer's split of `share` of the FFN neurons (the hottest, `hot_neuron_placement`)
    with the profile's replayed active sets: the benchmark's hybrid row."""
    return Decoder(weights, ffn=HybridFFN(
        weights, hot_neuron_placement(spec, profile, share),
        predictors=masks if masks is not None else ReplayMasks(profile, weights.device),
        active="predictor", gpu_backend=gpu_backend, cpu_backend=cpu_backend,
        time_gpu_part=False, cpu_part=cpu_part))


def hybrid_name(share: float, cpu_part: str) -> str:
    """A hybrid row's name: "hybrid 25%" (the worker thread), "hybrid 25% inline"."""
    return f"hybrid {share:.0%}" + ("" if cpu_part == "worker" else f" {cpu_part}")


def build_engines(weights: Any, spec: ModelSpec, profile: Any, shares: tuple[float, ...],
                  gpu_backend: str = "sparse_cuda", cpu_backend: str = "sparse_cpu",
                  cpu_parts: tuple[str, ...] = ("worker",)) -> list[BenchEngine]:
    """The decoders of the module docstring, sharing `weights` (on the GPU; the tests run
    them on the CPU with sparse_torch standing in for both backends)."""
    from powerbench.engine.sparse import SparseFFN
    from powerbench.engine.synthetic import TraceReplay

    masks = ReplayMasks(profile, weights.device)
    engines = [BenchEngine("dense", Decoder(weights), system=DENSE),
               BenchEngine(SPARSE, Decoder(weights, ffn=SparseFFN(weights, gpu_backend,
                                                                  TraceReplay(profile))))]
    for share in shares:
        offload = f"layer offload {share:.0%}"
        for cpu_part in cpu_parts:
            engines.append(BenchEngine(hybrid_name(share, cpu_part), hybrid_decoder(
                weights, spec, profile, share, masks, gpu_backend, cpu_backend, cpu_part),
                share, peer=offload))
        engines.append(BenchEngine(offload, Decoder(weights, ffn=HybridFFN(
            weights, layer_offload_placement(spec, share), active="dense",
            gpu_backend=gpu_backend, cpu_backend=cpu_backend, time_gpu_part=False)), share))
    return engines


def split_pass(decoder: Decoder, ids: Tensor, new_tokens: int) -> dict[str, float]:
    """One more generation with the hybrid FFN's decode-call timers reset: its GPU part's
    stream time, its CPU part's wall time, the load split (empty for the other engines)."""
    ffn = decoder.ffn
    if not isinstance(ffn, HybridFFN):
        return {}
    ffn.reset_timing()
    generate_timed(decoder, ids, new_tokens)
    return ffn.metrics()


def placement_of(decoder: Decoder, spec: ModelSpec) -> Placement:
    ffn = decoder.ffn
    return ffn.placement if isinstance(ffn, HybridFFN) else all_gpu_placement(spec)


def _less_handoff_ops(ops: Any, handoff_ops: float, placement: Placement) -> Any:
    """The FFN operator count per layer (an average over the layers) without the CPU
    part's hand-off operators, issued in the layers whose CPU part holds neurons."""
    import dataclasses

    share = float(np.mean(placement.gpu_counts < placement.neurons_per_layer))
    less = round(handoff_ops * share)
    return dataclasses.replace(ops, ffn_sparse=max(ops.ffn_sparse - less, 0) if ops.ffn_sparse
                               else 0, ffn_dense=max(ops.ffn_dense - less, 0) if ops.ffn_dense
                               else 0)


def simulated(decoder: Decoder, spec: ModelSpec, profile: Any, hardware: Any,
              cfg: HybridBenchConfig, prompt: Tensor,
              host: dict[str, float] | None = None) -> dict[str, float]:
    """The cost model's decode tokens/s for this decoder's run (see the module docstring);
    `host`: the measured host costs (`host_costs`) the twin charges."""
    import dataclasses
    from types import SimpleNamespace

    from powerbench.config.schema import BenchConfig
    from powerbench.engine.synthetic import kept_profile
    from powerbench.measure.twin import twin_config, twin_of
    from powerbench.simulator.simulate import simulate

    with torch.inference_mode():
        dense, ops, dtype, dense_rows = twin_of(decoder, prompt[:, :8])
    computes_all = dense or getattr(decoder.ffn, "active", "") == "dense"
    twin = twin_config(computes_all, ops, dtype, None, dense_rows, cfg.cpu_threads)
    if host:  # the sparse call beyond the one launch the twin's operator count charges
        twin = dataclasses.replace(
            twin, hybrid_roundtrip_us=host["hybrid_roundtrip_us"],
            hybrid_host_us=host["hybrid_host_us"],
            gpu_sparse_call_us=max(host["gpu_sparse_call_host_us"] - hardware.launch_s * 1e6,
                                   0.0))
        if isinstance(decoder.ffn, HybridFFN):  # its hand-offs are in hybrid_host_us
            twin = dataclasses.replace(twin, gpu_ops=_less_handoff_ops(
                twin.gpu_ops, host["hybrid_host_ops"], placement_of(decoder, spec)))
    bench = BenchConfig(prompt_tokens=cfg.prompt_tokens, new_tokens=cfg.new_tokens,
                        batch_size=cfg.batch, threads=cfg.cpu_threads)
    oracle = SimpleNamespace(param_count=0)  # replayed sets: exact, no predictor weights
    return simulate(twin, spec, kept_profile(profile, spec), placement_of(decoder, spec),
                    hardware, predictors=None if computes_all else oracle, bench=bench).metrics


def measure(weights: Any, spec: ModelSpec, profile: Any, cfg: HybridBenchConfig,
            hardware: Any = None, host: dict[str, dict[str, float]] | None = None,
            **backends: str) -> list[dict[str, Any]]:
    """Every engine in interleaved rounds; one row per engine (see the module docstring);
    with `hardware`, each row's simulated twin beside it (charging `host[cpu_part]`, the
    host costs measured with the row's CPU-part mode, when given; "worker" for the rows
    without a hybrid split)."""
    engines = build_engines(weights, spec, profile, cfg.gpu_ffn_shares,
                            cpu_parts=cfg.cpu_parts, **backends)
    ids = torch.randint(0, spec.vocab_size, (cfg.batch, cfg.prompt_tokens),
                        generator=torch.Generator().manual_seed(cfg.seed)).to(weights.device)
    decode_rows = run_decode_bench(ids, {e.name: e.decoder for e in engines}, {}, cfg.rounds,
                                   cfg.new_tokens, cfg.cpu_threads)
    by_name = {e.name: row for e, row in zip(engines, decode_rows, strict=True)}
    rows = []
    for engine, row in zip(engines, decode_rows, strict=True):
        split = split_pass(engine.decoder, ids, cfg.new_tokens)
        peer = by_name[engine.peer] if engine.peer else None
        mode = getattr(engine.decoder.ffn, "cpu_part", "worker")
        sim = (simulated(engine.decoder, spec, profile, hardware, cfg, ids,
                         host.get(mode) if host else None)
               if hardware is not None else {})
        sim_rate = sim.get("sim_decode_tokens_per_s", float("nan"))
        gpu_ms = split.get("hybrid_gpu_ffn_ms_per_decode_call", float("nan"))
        cpu_ms = split.get("hybrid_cpu_ffn_ms_per_decode_call", float("nan"))
        rows.append({
            "system": engine.system,
            "gpu_ffn_share": engine.gpu_ffn_share,
            "decode_tokens_per_s": row.decode_tokens_per_s,
            "p10": row.decode_tokens_per_s_p10, "p90": row.decode_tokens_per_s_p90,
            "speedup_vs_dense": row.speedup_vs_dense,
            "sim_decode_tokens_per_s": sim_rate,
            "sim_error_pct": 100.0 * (sim_rate / row.decode_tokens_per_s - 1.0),
            "speedup_vs_layer_offload": (row.decode_tokens_per_s / peer.decode_tokens_per_s
                                         if peer is not None else float("nan")),
            "ffn_us_per_call": row.ffn_us_per_call,
            "gpu_neuron_load_share": split.get("hybrid_gpu_neuron_load_share", float("nan")),
            "gpu_part_ms_per_call": gpu_ms, "cpu_part_ms_per_call": cpu_ms,
            "cpu_part_threads": split.get("hybrid_cpu_threads", float("nan")),
            "rounds": cfg.rounds, "cpu_threads": row.threads, "batch": cfg.batch})
    return rows


COLUMNS = ("system", "decode_tokens_per_s", "p10", "p90", "sim_decode_tokens_per_s",
           "sim_error_pct", "speedup_vs_dense", "speedup_vs_layer_offload",
           "gpu_neuron_load_share", "gpu_part_ms_per_call", "cpu_part_ms_per_call",
           "cpu_part_threads", "ffn_us_per_call")
NOTES = [
    "SYNTHETIC weights of the real shapes: only speed is meaningful; active sets replayed "
    "from the synthetic profile (an exact, free predictor).",
    "Attention, KV cache and LM head on the GPU in every row; the rows differ in where the "
    "FFN runs. ffn_us_per_call is the FFN call's host wall time (for all-GPU rows the launch "
    "cost only: the GPU runs asynchronously). In a hybrid row it also waits for the GPU's "
    "attention work before the CPU part can start, so the parts' times are not subtracted from "
    "it: how far the parts overlap within a call is what `python experiments/bench_gpu.py "
    "timeline` measures (host time per phase of each FFN call).",
    "sim_*: the cost model (simulated) for the same run on this machine's `local` profile, "
    "measured by microbenchmarks just before (HBM and PCIe bandwidth, GPU GEMM FLOP/s, launch "
    "and sync latency, CPU memory bandwidth and our CPU kernels' rates)."]


def local_profile(cfg: HybridBenchConfig, cache_file: str) -> Any:
    """This machine's `local` hardware profile, measured now (GPU included; our CPU kernels
    at the CPU part's dtype and thread count, one sample: measured just before the rows, it
    needs no window spread over spells of the machine's speed) and kept in `cache_file`."""
    from powerbench.hardware.config import LocalHardwareConfig
    from powerbench.measure.local_kernels import load_local

    return load_local(LocalHardwareConfig(
        remeasure=True, cache_file=cache_file, storage=False, threads=[1, cfg.cpu_threads],
        kernel_threads=[cfg.cpu_threads], kernel_dtypes=[cfg.dtype], kernel_samples=1))


def hybrid_report(full: ModelSpec, cfg: HybridBenchConfig, hardware: Any = None) -> Report:
    """The benchmark on `cfg.layers` layers of `full`'s shape (evenly spaced over its
    depth), weights built on the GPU; a Report without machine, load window or command."""
    import dataclasses

    from powerbench.engine.synthetic import synthetic_decoder_weights, torch_dtype, trace_profile
    from powerbench.hardware.microbench import cuda_host_op_costs

    if not torch.cuda.is_available():
        raise RuntimeError("the hybrid benchmark needs a CUDA GPU (engine=hybrid); none is "
                           "visible here")
    spec = dataclasses.replace(full, n_layers=min(cfg.layers, full.n_layers))
    profile = trace_profile(full, spec.n_layers, cfg.trace_tokens, seed=cfg.seed)
    weights = synthetic_decoder_weights(spec, torch_dtype(cfg.dtype), seed=cfg.seed,
                                        device="cuda")
    from powerbench.measure.hybrid_host import host_costs

    modes = dict.fromkeys(("worker", *cfg.cpu_parts))  # the rows without a split: worker
    host = ({mode: host_costs(weights, cpu_part=mode) for mode in modes}
            if hardware is not None else None)
    op_us = ({k: v * 1e6 for k, v in cuda_host_op_costs(spec.d_model, spec.n_heads).items()}
             if hardware is not None else None)
    rows = measure(weights, spec, profile, cfg, hardware=hardware, host=host)
    notes = list(NOTES) if hardware is not None else NOTES[:2]
    if host is not None:
        worker = host["worker"]
        notes.append(
            f"Host costs measured here before the rows (twin inputs): the hybrid layer's "
            f"round trip {worker['hybrid_roundtrip_us']:.1f} us (x and mask to the host, "
            f"the worker thread, its y back and added; one active neuron), "
            f"{worker['hybrid_host_us']:.1f} us of it on the decoder's thread, one sparse_cuda "
            f"FFN call {worker['gpu_sparse_call_host_us']:.1f} us of host time "
            f"(launch {hardware.launch_s * 1e6:.1f} us).")
        if "inline" in host:
            notes.append(
                f"Rows marked inline run the CPU part on the decoder's thread once the GPU "
                f"part is issued (engine.ffn.cpu_part=inline): its round trip "
                f"{host['inline']['hybrid_roundtrip_us']:.1f} us, all on that thread.")
    if op_us is not None:
        notes.append("Host time to issue one call, GPU idle (measured here; not yet charged "
                     "by class in the twin): " + ", ".join(f"{k} {v:.1f} us"
                                                         for k, v in op_us.items()) + ".")
    return Report(
        study="hybrid_gpu", name=f"hybrid_{full.name}", rows=rows, key=("system",),
        title=f"engine=hybrid vs layer offload, {full.name} shape ({spec.n_layers} of "
              f"{full.n_layers} layers), {cfg.dtype}, batch {cfg.batch}",
        columns=COLUMNS, params={"model": full.name, **dataclasses.asdict(cfg), **(host or {})},
        notes=notes)
