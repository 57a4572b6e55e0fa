"""Decode benchmark: our decoder, dense vs sparse with each predictor, side by side.

    powerbench bench-decode [task.rounds=15] [task.predictors=[fixed,adaptive,oracle]] [overrides]

Every engine's decoder is built once (predictors from the cache the pipeline fills, or
trained now); then each of `rounds` rounds generates `bench.new_tokens` tokens for the same
prompt batch with every engine in turn, each round in its own seeded random order
(harness.round_orders), so drifting machine load hits all of them alike. Decode tokens/s is
the median over rounds, and each speedup the median over the rounds of the two engines'
ratio within a round (ops.bench_timing.round_quartiles); the fastest round of each engine
(the least disturbed by other load on a shared machine) and their ratio are shown beside
them. A second, separate pass times the FFN calls alone (us per layer call, its speedup
paired the same way), since the FFN is only part of a decode step (Amdahl). Weights read per
token (attention, output projection, predictors, and the FFN rows of the neurons actually
computed) give the achieved GB/s. One warm-up generation per engine comes first; it also
records the oracle's active sets, which later generations replay (its speed bound).

The driver (powerbench.tasks.bench_decode) writes results/decode_cpu.csv and logs one
MLflow run (experiment `bench_decode`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from powerbench.engine.decoder import Decoder
from powerbench.engine.timing import StepClock
from powerbench.measure.harness import interleaved
from powerbench.ops.bench_timing import round_quartiles
from powerbench.threads import torch_threads


@dataclass
class DecodeRow:
    engine: str  # "dense" or the sparse backend
    predictor: str  # none | fixed | adaptive | oracle (+ " unfused": predictor, then operator)
    decode_tokens_per_s: float  # median over rounds
    decode_tokens_per_s_p10: float
    decode_tokens_per_s_p90: float
    # the median over the rounds of this engine's tok/s / dense's in the same round
    # (ops.bench_timing.round_quartiles: steadier than the medians' ratio on a drifting host)
    speedup_vs_dense: float
    decode_tokens_per_s_best: float  # fastest round (the least disturbed by other load)
    speedup_best_vs_dense: float  # ratio of the fastest rounds
    ffn_us_per_call: float  # median of the FFN-only pass
    ffn_speedup_vs_dense: float
    computed_fraction: float  # FFN neurons computed per layer call (union over the batch)
    weight_mb_per_token: float
    achieved_gbps: float
    rounds: int
    threads: int
    batch: int


class _TimedFFN:
    """Wraps an FFN and sums the wall time of its decode calls (the FFN-only pass); calls
    of more than `rows` rows (the prompt) run untimed."""

    def __init__(self, ffn: Any, rows: int) -> None:
        self.ffn, self.rows, self.seconds, self.calls = ffn, rows, 0.0, 0

    def __call__(self, layer_idx: int, x: Tensor, observer: Any = None) -> Tensor:
        if x.shape[0] > self.rows:
            return self.ffn(layer_idx, x, observer)
        start = time.perf_counter()
        y = self.ffn(layer_idx, x, observer)
        self.seconds += time.perf_counter() - start
        self.calls += 1
        return y

    def rewind(self) -> None:
        rewind = getattr(self.ffn, "rewind", None)
        if rewind is not None:
            rewind()


def _nbytes(*tensors: Tensor | None) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def weight_bytes_per_token(decoder: Decoder, computed_fraction: float,
                           predictor_bytes: int = 0) -> float:
    """Weights one decode step reads: attention and the output projection in full, the FFN
    rows of the computed neurons (both matrices), the predictors (KV cache not counted)."""
    w = decoder.w
    attn = sum(_nbytes(a.wq, a.wk, a.wv, a.wo, a.bq, a.bk, a.bv, a.bo)
               for a in (layer.attn for layer in w.layers))
    ffn = 0
    for layer in w.layers:
        f = layer.ffn
        ffn += _nbytes(getattr(f, "w1", None), getattr(f, "w2", None),
                       getattr(f, "w_gate", None), getattr(f, "w_up", None),
                       getattr(f, "w_down", None))
    return float(attn + _nbytes(w.lm_head) + computed_fraction * ffn + predictor_bytes)


def generate_timed(decoder: Decoder, ids: Tensor, new_tokens: int) -> float:
    """Decode seconds of one generation (the FFN rewound first, e.g. replayed sets)."""
    rewind = getattr(decoder.ffn, "rewind", None)
    if rewind is not None:
        rewind()
    clock = StepClock(decoder.device)
    decoder.generate(ids, new_tokens, clock=clock)
    return clock.timing().decode_s


def run_decode_bench(ids: Tensor, engines: dict[str, Decoder],
                     predictor_bytes: dict[str, int], rounds: int, new_tokens: int,
                     threads: int) -> list[DecodeRow]:
    """Time every engine in `engines` (name "dense" required) as described above."""
    if "dense" not in engines:
        raise ValueError("the decode benchmark needs the dense engine as its baseline")
    steps = (new_tokens - 1) * ids.shape[0]
    names = list(engines)
    ffn_us: dict[str, list[float]] = {n: [] for n in names}

    def rate_of(decoder: Decoder):
        return lambda: steps / generate_timed(decoder, ids, new_tokens)

    with torch_threads(threads) as used, torch.inference_mode():
        # one warm-up each (it also records the oracle's active sets), then the rounds
        rates = interleaved({name: rate_of(engines[name]) for name in names}, rounds,
                            warmup=1)
        for _ in range(max(rounds // 3, 3)):
            for name in names:
                timed = _TimedFFN(engines[name].ffn, rows=ids.shape[0])
                generate_timed(engines[name].with_ffn(timed), ids, new_tokens)
                ffn_us[name].append(timed.seconds / max(timed.calls, 1) * 1e6)
    dense_best = max(rates["dense"])
    rows = []
    for name in names:
        dec = engines[name]
        metrics = getattr(dec.ffn, "metrics", None)
        fraction = (metrics() or {}).get("sparse_computed_fraction", 1.0) if metrics else 1.0
        rate = statistics.median(rates[name])
        qs = statistics.quantiles(rates[name], n=10) if len(rates[name]) > 1 else [rate] * 9
        nbytes = weight_bytes_per_token(dec, fraction, predictor_bytes.get(name, 0))
        ffn = statistics.median(ffn_us[name])
        backend = getattr(dec.ffn, "backend", "dense")
        rows.append(DecodeRow(
            engine=backend, predictor=name if name != "dense" else "none",
            decode_tokens_per_s=rate, decode_tokens_per_s_p10=qs[0],
            decode_tokens_per_s_p90=qs[-1],
            speedup_vs_dense=round_quartiles(rates[name], rates["dense"])[1],
            decode_tokens_per_s_best=max(rates[name]),
            speedup_best_vs_dense=max(rates[name]) / dense_best,
            ffn_us_per_call=ffn,
            ffn_speedup_vs_dense=round_quartiles(ffn_us["dense"], ffn_us[name])[1],
            computed_fraction=fraction, weight_mb_per_token=nbytes / 1e6,
            achieved_gbps=nbytes * rate / ids.shape[0] / 1e9, rounds=rounds, threads=used,
            batch=ids.shape[0]))
    return rows


class KnobDecoder(Decoder):
    """A decoder whose generations run under one setting of the sparse_cpu kernels' run-time
    knobs (powerbench.ops.cpu_knobs), every other knob at its default: every kernel call of
    the generation (attention and output projections, the fused decode operators, the FFN)
    sees it, and the defaults are restored after, so the other engines of the same run are
    untouched. `knobs` and `defaults` are every knob's value in the extension's order
    (`knob_vector`), checked once when built: a generation sets them with the extension's op
    alone, as bench-operators' contenders do."""

    def __init__(self, base: Decoder, knobs: Sequence[int], defaults: Sequence[int]) -> None:
        self.__dict__.update(base.__dict__)  # base's weights, projections, FFN, rotary table
        self.knobs, self.defaults = list(knobs), list(defaults)
        self._set = torch.ops.powerbench_cpu.set_cpu_knobs.default

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        self._set(self.knobs)
        try:
            return super().generate(*args, **kwargs)
        finally:
            self._set(self.defaults)


def with_knob_variants(engines: dict[str, Decoder], predictor_bytes: dict[str, int],
                       variants: Sequence[str]) -> dict[str, Decoder]:
    """Each engine once per knob variant (``"default"``, ``"wide_adjacent_pct:0"``, ...:
    `bench-operators`' task.variants syntax), named "<engine> [<variant>]", so a kernel
    change made as a knob default is timed before and after in the same rounds, the dense
    kernel's included. Every variant runs as a KnobDecoder (the default's too: each pays the
    same per-generation cost); the baseline "dense" stays the dense engine at the defaults,
    and "dense [<variant>]" is added for every other variant; each variant's predictor bytes
    are added to `predictor_bytes` under its name. Without variants, `engines` unchanged."""
    if not variants:
        return engines
    from powerbench.ops import get_backend
    from powerbench.ops.cpu_knobs import knob_vector, parse_variant

    specs = get_backend("sparse_cpu", fallback=False).knob_specs()
    defaults = knob_vector({}, specs)
    settings = {v.strip(): knob_vector(parse_variant(v, specs), specs) for v in variants}
    out: dict[str, Decoder] = {}
    for name, dec in engines.items():
        if name == "dense":
            out[name] = dec
        for variant, knobs in settings.items():
            if name == "dense" and knobs == defaults:
                continue
            out[f"{name} [{variant}]"] = KnobDecoder(dec, knobs, defaults)
            predictor_bytes[f"{name} [{variant}]"] = predictor_bytes.get(name, 0)
    return out


def build_engines(loaded: Any, strategies: Sequence[str], predictor_sets: dict[str, Any],
                  backend: str, unfused: str | None, torch_linear_baseline: bool = False
                  ) -> dict[str, Decoder]:
    """Decoders sharing one set of weights: "dense" plus one sparse per strategy (and,
    with `unfused`, that strategy's predictor run in torch before the operator; with
    `torch_linear_baseline`, "dense F.linear": the dense decoder with every projection in
    torch)."""
    from powerbench.engine.decoder_engine import DecoderEngine
    from powerbench.engine.sparse import SparseFFN

    dense = DecoderEngine().build_decoder(loaded)
    engines = {"dense": dense}
    if torch_linear_baseline:
        engines["dense F.linear"] = _torch_linear_decoder(dense)
    for name in strategies:
        engines[name] = Decoder(dense.w, ffn=SparseFFN(dense.w, backend, predictor_sets[name],
                                                       loaded=loaded))
    if unfused:
        engines[f"{unfused} unfused"] = Decoder(dense.w, ffn=SparseFFN(
            dense.w, backend, predictor_sets[unfused], fused=False, loaded=loaded))
    return engines


def _torch_linear_decoder(dense: Decoder) -> Decoder:
    """`dense` with every projection (its dense FFN's too) in torch's F.linear."""
    import torch.nn.functional as F

    return Decoder(dense.w, linear=F.linear)


def build_synthetic_engines(weights: Any, profile: Any, backend: str, predictor_rank: int = 0,
                            seed: int = 0, torch_linear_baseline: bool = False,
                            ) -> tuple[dict[str, Decoder], dict[str, int]]:
    """Decoders sharing synthetic `weights` (`powerbench.engine.synthetic`): "dense", the
    sparse engine on replayed trace sets ("trace", free oracle) and, with
    `predictor_rank > 0`, the same with a low-rank predictor's cost; and predictor bytes.
    With `torch_linear_baseline`, also "dense F.linear": the dense decoder with every
    projection in torch (the others use the default dense kernel, `engine.linear`)."""
    from powerbench.engine.sparse import SparseFFN
    from powerbench.engine.synthetic import TraceReplay

    dense = Decoder(weights)
    engines, pbytes = {"dense": dense}, {}
    if torch_linear_baseline:
        engines["dense F.linear"] = _torch_linear_decoder(dense)
    variants = [TraceReplay(profile)]
    if predictor_rank > 0:
        variants.append(TraceReplay(profile, rank=predictor_rank, d_model=weights.d_model,
                                    dtype=weights.dtype, seed=seed))
    for sets in variants:
        engines[sets.strategy] = Decoder(weights, ffn=SparseFFN(weights, backend, sets))
        pbytes[sets.strategy] = sets.param_bytes
    return engines, pbytes
