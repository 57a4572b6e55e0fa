"""engine=hybrid on a real-size shape where only torch is installed (a lent GPU machine).

    PYTHONPATH=. python3 experiments/bench_hybrid.py [--model opt_6_7b] [--layers 8]
        [--shares 0.25 0.5] [--rounds 5] [--threads 8] [--publish]

Dense all-on-GPU (cuBLAS), sparse_cuda all-on-GPU, and for each GPU share of the FFN bytes
PowerInfer's hybrid split (hot neurons on the GPU, cold on the CPU, concurrent) against
llama.cpp-style layer offload of the same bytes, in interleaved rounds
(powerbench.measure.hybrid_bench). Synthetic weights of the model's real shapes: only speed
is meaningful. Writes hybrid_<model>.csv/.json/.txt into --out-dir; --publish also writes
the page results/hybrid_gpu/hybrid_<model>.md. Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout

import torch  # noqa: E402
import yaml  # noqa: E402

from powerbench.measure.harness import LoadWindow, finish  # noqa: E402
from powerbench.measure.hybrid_bench import HybridBenchConfig, hybrid_report, local_profile  # noqa: E402
from powerbench.model.spec import ModelSpec, SparsityStats  # noqa: E402


def model_spec(name: str) -> ModelSpec:
    """The model's spec (shapes, published sparsity) from conf/model/<name>.yaml."""
    path = ROOT / "conf" / "model" / f"{name}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in path.parent.glob("*.yaml")
                       if "spec:" in p.read_text())
        raise SystemExit(f"--model {name}: no {path.name}; models with shapes: {known}")
    node = yaml.safe_load(path.read_text())
    if not node.get("spec"):
        raise SystemExit(f"--model {name} has no `spec` section (shapes)")
    stats = node.get("stats")
    return ModelSpec(name=name, hf_id=node.get("hf_id"),
                     stats=SparsityStats(**stats) if stats else None, **node["spec"])


def portable_args(argv: list[str]) -> list[str]:
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


def main() -> int:
    p = argparse.ArgumentParser(prog="bench_hybrid", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="opt_6_7b")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--shares", type=float, nargs="+", default=[0.25, 0.5])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--prompt-tokens", type=int, default=16)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--threads", type=int, default=8, help="CPU workers of the CPU part")
    p.add_argument("--no-simulate", action="store_true",
                   help="skip the simulated twin (it measures this machine's local profile, "
                        "GPU included, and needs hydra-core/omegaconf for the bench config)")
    p.add_argument("--out-dir", type=Path, default=Path("."))
    p.add_argument("--publish", action="store_true", help="also write results/hybrid_gpu/")
    p.add_argument("--results-dir", type=Path, default=ROOT / "results")
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_hybrid needs a CUDA GPU (engine=hybrid); none is visible")
    cfg = HybridBenchConfig(layers=args.layers, gpu_ffn_shares=tuple(args.shares),
                            batch=args.batch, prompt_tokens=args.prompt_tokens,
                            new_tokens=args.new_tokens, rounds=args.rounds,
                            cpu_threads=args.threads)
    full = model_spec(args.model)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    hardware = (None if args.no_simulate else
                local_profile(cfg, str(args.out_dir / "local_profile.json")))
    with LoadWindow() as load:
        report = hybrid_report(full, cfg, hardware)
    report.load = load
    report.command = "PYTHONPATH=. python3 experiments/bench_hybrid.py " + " ".join(
        shlex.quote(a) for a in portable_args(sys.argv[1:]))
    finish(report, args.out_dir, publish_to=args.results_dir if args.publish else None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
