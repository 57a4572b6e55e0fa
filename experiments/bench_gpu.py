"""The GPU benchmarks where only torch is installed (a lent GPU machine: no Hydra, no MLflow).

    PYTHONPATH=. python3 experiments/bench_gpu.py operators [--quick] [--device cuda] [...]
    PYTHONPATH=. python3 experiments/bench_gpu.py hybrid [--model opt_6_7b] [--layers 8]
        [--shares 0.25 0.5] [--rounds 5] [--threads 8] [--no-simulate] [--publish]

    PYTHONPATH=. python3 experiments/bench_gpu.py timeline [--share 0.25] [--out-dir DIR]
    PYTHONPATH=. python3 experiments/bench_gpu.py kernels [--shapes 4096x16384] [--batches 1 8]
        [--sparsities 0.5 0.9 0.99] [--ops row axpy ffn_relu ffn_gated] [--reps 20]

`timeline`: engine=hybrid's host time per FFN call, phase by phase (the decoder thread's
mask, hand-over, GPU-part launches and merge; the worker's CPU part), and a profiler trace
of one generation (powerbench.measure.hybrid_timeline). A development aid, like `kernels`.

`kernels`: every GPU kernel (and memset) one sparse_cuda call launches, timed by the torch
profiler (fp16 weights and x, the benchmark's layer and sorted int64 ids, L2 flushed before
each call), with the op's summed kernel time and the GB/s that gives on the bytes it touches.
A development aid: its numbers are printed, not published.

`operators`: sparse operators vs the best dense kernel (powerbench.ops.bench); writes
<out-dir>/operators_<device>/operators[_quick].csv and .png. The Hydra task
`powerbench bench-operators` is the same benchmark with a run dir and MLflow.

`hybrid`: engine=hybrid against llama.cpp-style layer offload of the same GPU bytes on a
real-size shape with synthetic weights, in interleaved rounds, each row beside its
simulated twin (powerbench.measure.hybrid_bench); writes hybrid_<model>.csv/.json/.txt into
--out-dir, --publish also the page results/hybrid_gpu/. Needs a CUDA GPU. The Hydra task is
`powerbench bench-hybrid`.

Both are thin: the arguments become the library's typed configs, the library measures. They
import torch, numpy, pandas and PyYAML (matplotlib for the operators plot), never Hydra,
omegaconf, MLflow or cvxpy (tests/measure/test_gpu_script.py makes those unimportable).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout

import torch  # noqa: E402

from powerbench.load_window import LoadWindow  # noqa: E402


def operators(args: argparse.Namespace) -> int:
    from powerbench.ops.bench import QUICK, OperatorBenchConfig, run_benchmark
    from powerbench.ops.bench_report import target_notes, write_outputs

    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = replace(QUICK if args.quick else OperatorBenchConfig(), device=args.device)
    chosen = {"shapes": args.shapes, "dtypes": args.dtypes, "batches": args.batches,
              "sparsities": args.sparsities, "ops": args.ops, "backends": args.backends}
    cfg = replace(cfg, **{k: tuple(v) for k, v in chosen.items() if v})
    with LoadWindow() as load:
        rows, _ = run_benchmark(cfg, log=lambda line: print(line, flush=True))
    print("\n".join(target_notes(rows)))
    outputs = write_outputs(rows, args.out_dir, cfg.device, "_quick" if args.quick else "",
                            plot=not args.no_plot)
    print(f"# {len(rows)} rows; {load.line()}; wrote {', '.join(map(str, outputs))}")
    return 0


def kernels(args: argparse.Namespace) -> int:
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    from powerbench.ops import get_backend
    from powerbench.ops.bench import LayerData, active_ids, sparse_fn, touched_bytes

    ops = get_backend("sparse_cuda", fallback=False)
    gen = torch.Generator().manual_seed(0)
    flush = torch.ones(512 * 2**20 // 4, device="cuda")  # 512 MB: evicts the 50 MB L2
    for shape in args.shapes:
        d_model, d_ffn = (int(v) for v in shape.split("x"))
        layer = LayerData.make(d_model, d_ffn, torch.float16, "cuda", gen)
        for batch in args.batches:
            x = torch.randn(batch, d_model, generator=gen).to("cuda", torch.float16)
            coeffs = torch.randn(batch, d_ffn, generator=gen).to("cuda", torch.float16)
            for sparsity in args.sparsities:
                idx = active_ids(d_ffn, sparsity, gen, "cuda")
                for op in args.ops:
                    fn = sparse_fn(op, ops, layer, x, coeffs, idx)
                    fn()
                    torch.cuda.synchronize()
                    with profile(activities=[ProfilerActivity.CUDA]) as prof:
                        for _ in range(args.reps):
                            flush.sum()
                            fn()
                        torch.cuda.synchronize()
                    per_kernel: dict[str, float] = {}
                    for evt in prof.events():
                        if evt.device_type != DeviceType.CUDA or "reduce_kernel" in evt.name:
                            continue  # the flush's sum
                        us = evt.time_range.elapsed_us() / args.reps
                        per_kernel[evt.name] = per_kernel.get(evt.name, 0.0) + us
                    total = sum(per_kernel.values())
                    gb = touched_bytes(op, idx.numel(), d_model, batch, 2, 2) / 1e9
                    print(f"{op:9s} {shape} b{batch} {sparsity:.0%}: kernels {total:7.2f} us, "
                          f"{gb / max(total, 1e-9) * 1e6:7.1f} GB/s", flush=True)
                    for name, us in sorted(per_kernel.items(), key=lambda kv: -kv[1]):
                        print(f"    {us:7.2f} us  {name[:110]}")
    return 0


def model_spec(name: str) -> Any:
    """The model's ModelSpec (shapes, published sparsity) from conf/model/<name>.yaml, built
    by the library's `spec_from_sections` (what `spec_from_config` uses: they cannot drift)."""
    import yaml

    from powerbench.model.loading import spec_from_sections

    path = ROOT / "conf" / "model" / f"{name}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in path.parent.glob("*.yaml") if "spec:" in p.read_text())
        raise SystemExit(f"--model {name}: no {path.name}; models with shapes: {known}")
    node = yaml.safe_load(path.read_text())
    if not node.get("spec"):
        raise SystemExit(f"--model {name} has no `spec` section (shapes)")
    return spec_from_sections(node["name"], node["spec"], node.get("stats"), node.get("hf_id"))


def portable_args(argv: Sequence[str]) -> list[str]:
    """The arguments without the machine's own paths (--out-dir, --results-dir)."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--out-dir", "--results-dir"):
            skip = True
        elif not arg.startswith(("--out-dir=", "--results-dir=")):
            kept.append(arg)
    return kept


def hybrid(args: argparse.Namespace) -> int:
    from powerbench.measure.harness import finish
    from powerbench.measure.hybrid_bench import HybridBenchConfig, hybrid_report, local_profile

    cfg = HybridBenchConfig(layers=args.layers, gpu_ffn_shares=tuple(args.shares),
                            batch=args.batch, prompt_tokens=args.prompt_tokens,
                            new_tokens=args.new_tokens, rounds=args.rounds,
                            cpu_threads=args.threads, cpu_parts=tuple(args.cpu_parts))
    full = model_spec(args.model)
    if not torch.cuda.is_available():
        raise SystemExit(f"bench_gpu.py hybrid needs a CUDA GPU (engine=hybrid) and none is "
                         f"visible; {full.name}: {full.n_layers} layers, d_model "
                         f"{full.d_model}, d_ffn {full.d_ffn}")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    hardware = (None if args.no_simulate else
                local_profile(cfg, str(args.out_dir / "local_profile.json")))
    with LoadWindow() as load:
        report = hybrid_report(full, cfg, hardware)
    report.load = load
    report.command = "PYTHONPATH=. python3 experiments/bench_gpu.py " + " ".join(
        shlex.quote(a) for a in portable_args(args.argv))
    finish(report, args.out_dir, publish_to=args.results_dir if args.publish else None)
    return 0


def timeline(args: argparse.Namespace) -> int:
    import dataclasses
    import json

    from powerbench.engine.synthetic import synthetic_decoder_weights, trace_profile
    from powerbench.measure.hybrid_bench import hybrid_decoder
    from powerbench.measure.hybrid_timeline import chrome_trace, phase_table, phase_times

    full = model_spec(args.model)
    if not torch.cuda.is_available():
        raise SystemExit("bench_gpu.py timeline needs a CUDA GPU (engine=hybrid)")
    spec = dataclasses.replace(full, n_layers=min(args.layers, full.n_layers))
    profile = trace_profile(full, spec.n_layers, trace_tokens=256)
    weights = synthetic_decoder_weights(spec, torch.float16, device="cuda")
    decoder = hybrid_decoder(weights, spec, profile, args.share, cpu_part=args.cpu_part)
    ids = torch.randint(0, spec.vocab_size, (1, args.prompt_tokens),
                        generator=torch.Generator().manual_seed(0)).to("cuda")
    torch.set_num_threads(args.threads)
    result = phase_times(decoder, ids, args.new_tokens)
    result["cpu_part_threads"] = decoder.ffn.cpu_runner.threads.chosen
    print(f"{full.name}, {spec.n_layers} layers, {args.share:.0%} of the FFN on the GPU, "
          f"CPU part ({args.cpu_part}) on {result['cpu_part_threads']} thread(s)")
    print(phase_table(result))
    args.out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"timeline_{full.name}_{round(100 * args.share)}_{args.cpu_part}"
    (args.out_dir / f"{stem}_phases.json").write_text(json.dumps(result, indent=1))
    print("trace:", chrome_trace(decoder, ids, 6, args.out_dir / f"{stem}_trace.json.gz"))
    decoder.ffn.cpu_runner.close()
    return 0


def build_parser() -> argparse.ArgumentParser:
    from powerbench.engine.config import CPU_PART_MODES
    from powerbench.ops.bench import DTYPES, OPS

    p = argparse.ArgumentParser(prog="bench_gpu", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="bench", required=True)
    o = sub.add_parser("operators", help="sparse operators vs the best dense kernel")
    o.add_argument("--quick", action="store_true",
                   help="4096x16384 fp32 batch 1, 4 sparsities (under a minute)")
    o.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    o.add_argument("--shapes", nargs="+", help="d_model x d_ffn, e.g. 4096x16384")
    o.add_argument("--dtypes", nargs="+", choices=tuple(DTYPES))
    o.add_argument("--batches", nargs="+", type=int)
    o.add_argument("--sparsities", nargs="+", type=float)
    o.add_argument("--ops", nargs="+", choices=OPS)
    o.add_argument("--backends", nargs="+")
    o.add_argument("--threads", type=int, help="torch.set_num_threads before running")
    o.add_argument("--out-dir", type=Path, default=ROOT / "results")
    o.add_argument("--no-plot", action="store_true")
    o.set_defaults(run=operators)
    k = sub.add_parser("kernels", help="per-kernel GPU times of sparse_cuda (torch profiler)")
    k.add_argument("--shapes", nargs="+", default=["4096x16384", "8192x28672"])
    k.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    k.add_argument("--sparsities", nargs="+", type=float, default=[0.5, 0.9, 0.99])
    k.add_argument("--ops", nargs="+", choices=OPS, default=list(OPS))
    k.add_argument("--reps", type=int, default=20)
    k.set_defaults(run=kernels)
    t = sub.add_parser("timeline", help="engine=hybrid's host time by phase, and a trace")
    t.add_argument("--model", default="opt_6_7b")
    t.add_argument("--layers", type=int, default=8)
    t.add_argument("--share", type=float, default=0.25, help="share of the FFN on the GPU")
    t.add_argument("--new-tokens", type=int, default=32)
    t.add_argument("--prompt-tokens", type=int, default=16)
    t.add_argument("--threads", type=int, default=8, help="CPU workers of the CPU part")
    t.add_argument("--cpu-part", default="worker", choices=CPU_PART_MODES)
    t.add_argument("--out-dir", type=Path, default=Path("."))
    t.set_defaults(run=timeline)
    h = sub.add_parser("hybrid", help="engine=hybrid vs layer offload (+ simulated twin)")
    h.add_argument("--model", default="opt_6_7b")
    h.add_argument("--layers", type=int, default=8)
    h.add_argument("--shares", type=float, nargs="+", default=[0.25, 0.5])
    h.add_argument("--rounds", type=int, default=5)
    h.add_argument("--new-tokens", type=int, default=32)
    h.add_argument("--prompt-tokens", type=int, default=16)
    h.add_argument("--batch", type=int, default=1)
    h.add_argument("--threads", type=int, default=8, help="CPU workers of the CPU part")
    h.add_argument("--cpu-parts", nargs="+", default=["worker", "inline"],
                   choices=CPU_PART_MODES,
                   help="the hybrid rows' CPU-part modes (engine.ffn.cpu_part), a row each")
    h.add_argument("--no-simulate", action="store_true",
                   help="skip the simulated twin (it first measures this machine's local "
                        "profile, GPU included: microbenchmarks of a few minutes)")
    h.add_argument("--out-dir", type=Path, default=Path("."))
    h.add_argument("--publish", action="store_true", help="also write results/hybrid_gpu/")
    h.add_argument("--results-dir", type=Path, default=ROOT / "results")
    h.set_defaults(run=hybrid)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    return args.run(args)


if __name__ == "__main__":
    raise SystemExit(main())
