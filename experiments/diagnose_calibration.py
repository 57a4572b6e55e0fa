"""Which term of the cost model dominates the runs behind issue 15's calibration rows.

    PYTHONPATH=. python experiments/diagnose_calibration.py [--targets fig10 fig11 fig18]
        [--what-if base:0.6 additive_launch:0.6 kv_on_host:0.6 base:0.4]

Part 1 (always): every run the chosen targets' calibration rows read (composed and placed
exactly as experiments/fit_efficiency.py does), simulated once at conf/simulator's factors,
with its decode step split into the cost model's terms (milliseconds per token):

    gpu_attn   dense attention on the GPU (weights, Q/K/V/O), of which `kv` is its KV cache
    cpu_attn   attention of layers whose home is the host (weights and KV)
    ffn_gpu    busy time of the GPU's FFN neurons (dense or neuron-aware sparse kernels)
    ffn_cpu    busy time of the host's FFN neurons
    ffn        the FFN on the critical path (hybrid layers: max of both branches)
    xfer       PCIe on the critical path: layer transitions, logits to the host
    ffn_link   PCIe on a hybrid layer's FFN branch (x and mask out, partial sum back; off-path)
    sync       one CPU-GPU synchronisation per hybrid layer
    pred       predictors;  head  the output projection

and the prompt (`prefill`, ms per run). Only the decode step's critical-path components sum
to `step`; ffn_gpu, ffn_cpu and ffn_link are busy times inside `ffn`.

Part 2 (`--what-if VARIANT:CPU_SPARSE ...`): the best (gpu_dense, gpu_sparse, int4) point of a
coarse grid, and its rows, when the cost model is changed in one structural way and/or
`efficiency.cpu_sparse` (MEASURED here, 0.6) is set otherwise. Variants (patched for the
run only; the cost model itself is unchanged):

    base             the cost model as it is
    additive_launch  GPU kernel launches ADD to the roofline (launch_s per kernel, a fixed
                     cost per kernel) instead of overlapping it (max)
    kv_on_host       PowerInfer (sparse mode): the K/V cache and the score ops of a
                     GPU-homed layer run on the host (PowerInfer's llama.cpp reserves the KV
                     cache in VRAM only when every layer is offloaded,
                     `llama_reserve_model_kv_cache`), with Q/K/V out and the result back
                     over PCIe and two synchronisations per layer; the VRAM the placement
                     kept for the KV cache is not handed to neurons (conservative)

Diagnostic only: no constant or structure is adopted from it.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

import numpy as np
import pandas as pd

from experiments import fit_efficiency as fe
from powerbench.simulator import rates
from powerbench.simulator.cost import CostModel, PassShape
from powerbench.simulator.simulate import predictor_inputs, simulate

TERMS = {  # column -> (breakdown component, device, critical path?)
    "gpu_attn": ("attention", "gpu", True), "cpu_attn": ("attention", "cpu", True),
    "ffn": ("ffn", "-", True), "ffn_gpu": ("ffn_busy", "gpu", False),
    "ffn_cpu": ("ffn_busy", "cpu", False), "sync": ("sync", "-", True),
}
LINK = {("transition", "-"), ("transition_out", "-"), ("logits_out", "-")}
COARSE = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


def kv_ms(job: fe.Job) -> float:
    """Mean decode-step time of the GPU-resident KV cache reads (part of `gpu_attn`)."""
    spec, _, placement, hardware, sized = job.inputs
    cfg, bench = job.cfg.simulator, job.cfg.bench
    pred, _, _ = predictor_inputs(cfg, spec, placement, sized)
    model = CostModel(spec, placement, hardware, cfg, pred)
    if "gpu" not in model.dev or bench.new_tokens < 2:
        return float("nan")
    context = bench.prompt_tokens + np.arange(1, bench.new_tokens).mean()
    layers = sum(d == "gpu" for d in placement.attn_device)
    nbytes = context * bench.batch_size * model.kv_token_bytes * layers
    return 1e3 * nbytes / (model.dev["gpu"].bandwidth * model.efficiency("gpu", weights=False))


def breakdown(job: fe.Job) -> dict[str, object]:
    """One run: its keys, tokens/s and decode-step terms in ms (see module docstring)."""
    spec, profile, placement, hardware, sized = job.inputs
    res = simulate(job.cfg.simulator, spec, profile, placement, hardware, predictors=sized,
                   bench=job.cfg.bench)
    frame = res.breakdown[res.breakdown.phase == "decode"]
    steps = max(job.cfg.bench.new_tokens - 1, 1)

    def ms(rows: pd.DataFrame) -> float:
        return float(rows.seconds.sum()) / steps * 1e3

    row: dict[str, object] = {
        "target": job.target, "model": spec.name, "hw": hardware.name,
        "system": placement.solver, "in": job.cfg.bench.prompt_tokens,
        "out": job.cfg.bench.new_tokens,
        "e2e_tok_s": res.metrics["sim_end_to_end_tokens_per_s"],
        "step": ms(frame[frame.critical_path]), "prefill": res.metrics["sim_prefill_ms"]}
    for name, (component, device, critical) in TERMS.items():
        row[name] = ms(frame[(frame.component == component) & (frame.device == device)
                             & (frame.critical_path == critical)])
    row["kv"] = kv_ms(job)
    link = [(c, d) in LINK for c, d in zip(frame.component, frame.device, strict=True)]
    row["xfer"] = ms(frame[link])
    row["ffn_link"] = ms(frame[frame.component == "ffn_link_busy"])
    row["pred"] = ms(frame[frame.component == "predictor"])
    row["head"] = ms(frame[frame.component == "lm_head"])
    return row


def part1(jobs: list[fe.Job]) -> pd.DataFrame:
    rows = [breakdown(j) for j in jobs if j.inputs is not None]
    frame = pd.DataFrame(rows)
    num = frame.select_dtypes("number").columns
    frame[num] = frame[num].round(2)
    return frame


def _additive_time(self: rates.DeviceRates, nbytes: object, flops: object,
                   ops: object) -> np.ndarray:
    nbytes, flops, ops = (np.asarray(v, dtype=np.float64) for v in (nbytes, flops, ops))
    return np.maximum(nbytes / self.bandwidth, flops / self.flops) + ops * self.op_s


_ATTENTION = CostModel.attention
SCORE_OPS = 6  # K/V copies, QK, scale, mask, softmax, PV: the ops that follow the KV cache


def _kv_on_host(self: CostModel, layer: int, shape: PassShape) -> np.ndarray:
    if not self.sparse or self.placement.attn_device[layer] != "gpu" or self.link is None:
        return _ATTENTION(self, layer, shape)
    s, gpu, cpu = self.spec, self.dev["gpu"], self.dev["cpu"]
    weights = gpu.time(self.attn_bytes / self.efficiency("gpu"),
                       2.0 * s.attn_params_per_layer * shape.rows,
                       self.ops["gpu"].attention - SCORE_OPS)
    kv = cpu.time(shape.kv_tokens * self.kv_token_bytes / self.efficiency("cpu", weights=False),
                  cpu.score_flops_equivalent(4.0 * s.n_heads * s.head_dim * shape.score_pairs),
                  SCORE_OPS)
    moves = (2 * self.link.sync_s + self.link.transfer(3 * self.x_bytes * shape.rows, "cpu")
             + self.link.transfer(self.x_bytes * shape.rows, "gpu"))
    return weights + kv + moves


VARIANTS: dict[str, tuple[tuple[type, str, Callable[..., np.ndarray]], ...]] = {
    "base": (),
    "additive_launch": ((rates.DeviceRates, "time", _additive_time),),
    "kv_on_host": ((CostModel, "attention", _kv_on_host),),
}


@contextlib.contextmanager
def variant(name: str) -> Iterator[None]:
    saved = [(cls, attr, getattr(cls, attr)) for cls, attr, _ in VARIANTS[name]]
    try:
        for cls, attr, fn in VARIANTS[name]:
            setattr(cls, attr, fn)
        yield
    finally:
        for cls, attr, fn in saved:
            setattr(cls, attr, fn)


def part2(jobs: list[fe.Job], what_ifs: Sequence[str]) -> list[str]:
    base0 = jobs[0].cfg.simulator.efficiency
    lines = []
    for item in what_ifs:
        name, _, cs = item.partition(":")
        base = replace(base0, cpu_sparse=float(cs or base0.cpu_sparse))
        for job in jobs:
            job.results.clear()  # memoised on (gpu_dense, gpu_sparse, int4) only
        with variant(name):
            ranked = sorted(
                ((fe.scores(c), p, c) for p in itertools.product(
                    COARSE, (0.2, 0.3, 0.5, 0.8), (0.3, 0.5, 0.7, 1.0))
                 for c in [fe.rows(jobs, fe.CALIBRATION, p, base)]), key=lambda r: r[0])
        score, point, comps = ranked[0]
        lines.append(f"{name}, cpu_sparse {base.cpu_sparse}: best (gpu_dense, gpu_sparse, "
                     f"int4) {point}, {sum(not c.within for c in comps)} rows miss, worst "
                     f"|err|/tol {score[0]:.2f}")
        lines += [f"  {c.published.label[:70]:70} {c.published.value:7.3g} {c.ours:8.4g} "
                  f"{_error(c):>8}  {'yes' if c.within else 'NO'}" for c in comps]
    return lines


def _error(c: fe.Comparison) -> str:
    return f"{c.error:+.3f}" if c.published.absolute else f"{100 * c.error:+.1f}%"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", nargs="+", default=["fig10", "fig11", "fig18"])
    parser.add_argument("--what-if", nargs="*", default=[], metavar="VARIANT[:CPU_SPARSE]",
                        help=f"part 2: search a coarse grid under {sorted(VARIANTS)}")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    names = sorted(set(args.targets) | (set(fe.CALIBRATION) if args.what_if else set()))
    jobs = fe.compose_jobs(names, {})
    fe.prepare(jobs)
    eff = jobs[0].cfg.simulator.efficiency
    print(f"{len(jobs)} runs placed in {time.perf_counter() - start:.0f} s; factors "
          f"gpu_dense {eff.gpu_dense}, gpu_sparse {eff.gpu_sparse}, int4 {eff.int4}, "
          f"cpu_sparse {eff.cpu_sparse}, cpu_dense {eff.cpu_dense}")
    with pd.option_context("display.width", 250, "display.max_rows", 500):
        print(part1([j for j in jobs if j.target in args.targets]).to_string(index=False))
    if args.what_if:
        print("\n".join(["", *part2(jobs, args.what_if)]))
    print(f"\n{time.perf_counter() - start:.0f} s in all")


if __name__ == "__main__":
    main()
