"""PowerInfer's own CPU FFN operators measured on this machine (`powerbench bench-powerinfer-ops`).

The cost model charges PowerInfer's CPU neurons at `efficiency.cpu_sparse` of the host's
bandwidth. This benchmark measures what PowerInfer's code itself achieves here: its
ggml (from a PowerInfer checkout: ggml.c, ggml-quants.c, ggml-alloc.c, ggml-backend.c)
is compiled with our C driver (csrc/powerinfer_ffn_bench.c), which times
`ggml_mul_mat_idx` (up rows whose predictor score passes the threshold) and `ggml_axpy`
(the down projection over W_down^T rows), fp16, one token, 4096x16384, against ggml's
dense `mul_mat` over the same matrices and a plain read of 1 GiB on the same threads.

Variants are (ISA build, threads): `native` (-march=native, AVX-512 where the CPU has it)
and `avx2` (-mavx2 -mfma -mf16c: the ISA of the papers' desktop CPUs, which have no
AVX-512). Each round runs every variant's process once (interleaved rounds, the harness's
`interleaved`); a row is the median over rounds of each process's median of `reps` graphs.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import statistics
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from powerbench.measure.harness import Report, cpu_flags, interleaved

PINNED_COMMIT = "d3ebd7c"  # the PowerInfer commit this driver was written against
GGML_SOURCES = ("ggml.c", "ggml-quants.c", "ggml-alloc.c", "ggml-backend.c")
DRIVER = Path(__file__).parent / "csrc" / "powerinfer_ffn_bench.c"
ISA_FLAGS = {"native": ("-march=native",), "avx2": ("-mavx2", "-mfma", "-mf16c")}
NEEDS = {"native": (), "avx2": ("avx2", "fma", "f16c")}  # /proc/cpuinfo flags to run it
RUN_TIMEOUT_S = 3600  # one driver process (a few seconds to a minute here)
CLONE_HINT = ("git clone https://github.com/SJTU-IPADS/PowerInfer && "
              f"git -C PowerInfer checkout {PINNED_COMMIT}")


class PowerInferSourceError(ValueError):
    """The PowerInfer checkout is missing or lacks a file the driver needs."""


@dataclass(frozen=True)
class OpTiming:
    """One line of the driver: an operator graph's time per layer and GB/s."""

    op: str
    sparsity: float
    active: int
    ms_per_layer: float
    gbps: float


@dataclass(frozen=True)
class DriverRun:
    """One process of the driver: the read bandwidth on its threads and every op line."""

    read_gbps: float
    ops: tuple[OpTiming, ...]


def parse_driver_output(text: str) -> DriverRun:
    """The driver's lines (`read threads T gbps X`, `op NAME sparsity S active A
    ms_per_layer M gbps X`) as a DriverRun; ValueError when no read line is present."""
    read, ops = None, []
    for line in text.splitlines():
        f = line.split()
        if f[:2] == ["read", "threads"] and len(f) == 5:
            read = float(f[4])
        elif f[:1] == ["op"] and len(f) == 10:
            ops.append(OpTiming(f[1], float(f[3]), int(f[5]), float(f[7]), float(f[9])))
    if read is None:
        raise ValueError(f"no `read threads ...` line in the driver's output:\n{text[-2000:]}")
    return DriverRun(read, tuple(ops))


def check_checkout(checkout: str | Path | None) -> Path:
    """The PowerInfer checkout with every source the driver compiles, else a clear error."""
    if not checkout:
        raise PowerInferSourceError(
            "task.powerinfer_dir is not set: point it at a PowerInfer checkout "
            f"(with network: {CLONE_HINT})")
    root = Path(checkout).expanduser()
    missing = [name for name in (*GGML_SOURCES, "ggml.h") if not (root / name).is_file()]
    if missing:
        raise PowerInferSourceError(
            f"{root} is not a PowerInfer checkout: it lacks {', '.join(missing)} "
            f"(with network: {CLONE_HINT})")
    return root


def checkout_commit(root: Path) -> str:
    """The checkout's git commit, or "unknown" (not the top of a git work tree: e.g. an
    unpacked archive, which may sit inside some other repository)."""
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel", "HEAD"],
                             check=True, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    top, commit = out.stdout.split()
    return commit if Path(top).resolve() == root.resolve() else "unknown"


def build_driver(root: Path, isa: str, build_root: Path) -> Path:
    """Compile PowerInfer's ggml and the driver for `isa` (ISA_FLAGS) into a folder named by
    the sources' and flags' hash; reuses an earlier build of the same inputs."""
    if isa not in ISA_FLAGS:
        raise ValueError(f"unknown ISA build {isa!r}; valid: {sorted(ISA_FLAGS)}")
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise PowerInferSourceError("no C compiler (cc or gcc) on PATH; set CC")
    flags = ("-O3", "-std=c11", "-D_GNU_SOURCE", "-DNDEBUG", "-pthread", *ISA_FLAGS[isa])
    digest = hashlib.sha256(" ".join((cc, *flags)).encode())
    for path in (*(root / n for n in (*GGML_SOURCES, "ggml.h")), DRIVER):
        digest.update(path.read_bytes())
    out = build_root / f"{isa}-{digest.hexdigest()[:12]}"
    binary = out / "powerinfer_ffn_bench"
    if binary.is_file():
        return binary
    out.mkdir(parents=True, exist_ok=True)
    objects = []
    for name in GGML_SOURCES:
        obj = out / (Path(name).stem + ".o")
        _compile([cc, *flags, "-c", str(root / name), "-o", str(obj)])
        objects.append(str(obj))
    tmp = out / f"powerinfer_ffn_bench.{os.getpid()}.tmp"  # concurrent builds do not mix
    _compile([cc, *flags, f"-I{root}", str(DRIVER), *objects, "-lm", "-o", str(tmp)])
    tmp.replace(binary)  # only a complete build is reused
    return binary


def _compile(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise PowerInferSourceError(f"`{' '.join(argv)}` failed:\n{done.stderr[-3000:]}")


def run_driver(binary: Path, threads: int, layers: int, passes: int, reps: int,
               sparsities: Sequence[float]) -> DriverRun:
    argv = [str(binary), str(threads), str(layers), str(passes), str(reps),
            *(f"{s:g}" for s in sparsities)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired as err:
        raise RuntimeError(f"`{' '.join(argv)}` ran past {RUN_TIMEOUT_S} s") from err
    if done.returncode != 0:
        raise RuntimeError(f"`{' '.join(argv)}` exited with {done.returncode}:\n"
                           f"{done.stderr[-2000:]}")
    return parse_driver_output(done.stdout)


def report_rows(runs: dict[tuple[str, int], list[DriverRun]]) -> list[dict]:
    """One row per (ISA build, threads, op, sparsity): medians over the rounds, GB/s per
    thread, and GB/s as a share of the read bandwidth and of ggml's dense FFN in the same
    processes."""
    rows = []
    for (isa, threads), procs in runs.items():
        read = statistics.median(p.read_gbps for p in procs)
        cells: dict[tuple[str, float], list[OpTiming]] = {}
        for p in procs:
            for t in p.ops:
                cells.setdefault((t.op, t.sparsity), []).append(t)
        dense = cells.get(("dense_ffn", 0.0))
        dense_gbps = statistics.median(t.gbps for t in dense) if dense else float("nan")
        for (op, sparsity), ts in cells.items():
            gbps = statistics.median(t.gbps for t in ts)
            rows.append({
                "isa_build": isa, "threads": threads, "op": op,
                "sparsity_pct": round(100 * sparsity, 2), "active_rows": ts[0].active,
                "ms_per_layer": round(statistics.median(t.ms_per_layer for t in ts), 4),
                "gbps": round(gbps, 2), "gbps_per_thread": round(gbps / threads, 2),
                "read_gbps": round(read, 2), "read_share": round(gbps / read, 3),
                "dense_ffn_share": round(gbps / dense_gbps, 3),
            })
    return rows


def thread_counts(cores: int) -> tuple[int, ...]:
    """1, 2, 4, ... below `cores`, and `cores`: how the gather's rate grows with threads."""
    counts, t = [], 1
    while t < cores:
        counts.append(t)
        t *= 2
    return (*counts, max(cores, 1))


@dataclass(frozen=True)
class PowerInferOpsConfig:
    checkout: Path
    build_root: Path
    isas: tuple[str, ...] = ("native", "avx2")
    threads: tuple[int, ...] = (1, 2)
    layers: int = 4
    passes: int = 8
    reps: int = 5
    rounds: int = 3
    sparsities: tuple[float, ...] = (0.5, 0.8, 0.9, 0.95)


def powerinfer_ops_report(cfg: PowerInferOpsConfig) -> Report:
    """Build each ISA variant, run every (ISA, threads) process once per round, and
    return the table (study operators_cpu, report powerinfer_ops)."""
    root = check_checkout(cfg.checkout)
    flags = cpu_flags()
    isas = tuple(i for i in cfg.isas if all(f in flags for f in NEEDS[i]))
    if not isas:
        raise PowerInferSourceError(f"this CPU runs none of the ISA builds {list(cfg.isas)} "
                                    f"(needs: {NEEDS}); task.isas=[native] always runs")
    binaries = {isa: build_driver(root, isa, cfg.build_root) for isa in isas}
    variants = {
        f"{isa} x{t}": (lambda b=binaries[isa], t=t: run_driver(b, t, cfg.layers, cfg.passes,
                                                                cfg.reps, cfg.sparsities))
        for isa in isas for t in cfg.threads
    }
    results = interleaved(variants, cfg.rounds)
    runs = {(isa, t): results[f"{isa} x{t}"] for isa in isas for t in cfg.threads}
    skipped = [i for i in cfg.isas if i not in isas]
    commit = checkout_commit(root)
    return Report(
        study="operators_cpu", name="powerinfer_ops", rows=report_rows(runs),
        key=("isa_build", "threads", "op", "sparsity_pct"),
        title="PowerInfer's own CPU FFN operators (ggml_mul_mat_idx, ggml_axpy; fp16, "
              "4096x16384, batch 1) vs ggml's dense mul_mat and a plain read, this machine",
        metrics=("gbps", "gbps_per_thread", "read_share", "dense_ffn_share", "ms_per_layer"),
        notes=[
            f"PowerInfer checkout at commit {commit} (the driver was written against "
            f"{PINNED_COMMIT}); its ggml compiled here with our driver "
            "(powerbench/measure/csrc/powerinfer_ffn_bench.c).",
            "sparse_up: ggml_mul_mat_idx over the rows whose predictor score passes the "
            "threshold; sparse_down: ggml_axpy over the same rows of W_down^T; sparse_ffn: "
            "both; dense_*: ggml_mul_mat over every row. GB/s counts the rows read "
            "(active rows x 8 KiB per matrix).",
            f"A graph runs {cfg.layers} layers (128 MiB per matrix, each its own) "
            f"{cfg.passes} times over: a graph costs more than its layers (on the 2-vCPU "
            "EPYC where this was written, one sparse layer alone took ~4 ms longer on two "
            "threads than inside a long graph), which PowerInfer pays once per token; a "
            "256 MB read runs before each graph. A "
            f"process's figure is its median of {cfg.reps} graphs, a row the median over "
            f"{cfg.rounds} interleaved rounds.",
            "read_gbps: a plain read of 1 GiB on the same threads in the same process; "
            "read_share = gbps / read_gbps; dense_ffn_share = gbps / ggml's dense FFN.",
            "isa_build avx2: -mavx2 -mfma -mf16c, the SIMD level of the PowerInfer paper's "
            "desktop CPUs; native: -march=native.",
            *([f"Not run: {', '.join(skipped)} (this CPU lacks its instructions)."]
              if skipped else []),
        ],
        params={"isas": list(isas), "threads": list(cfg.threads), "layers": cfg.layers,
                "passes": cfg.passes, "reps": cfg.reps, "rounds": cfg.rounds, "sparsities": list(cfg.sparsities),
                "powerinfer_commit": commit},
    )
