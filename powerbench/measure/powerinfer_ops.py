"""PowerInfer's own CPU FFN operators measured on this machine (`powerbench bench-powerinfer-ops`).

The cost model charges PowerInfer's CPU neurons at `efficiency.cpu_sparse` of the host's
bandwidth. This benchmark measures what PowerInfer's code itself achieves here: its
ggml (from a PowerInfer checkout: ggml.c, ggml-quants.c, ggml-alloc.c, ggml-backend.c)
is compiled with our C driver (csrc/powerinfer_ffn_bench.c), which times
`ggml_mul_mat_idx` (up rows whose predictor score passes the threshold) and `ggml_axpy`
(the down projection over W_down^T rows), fp16, one token, 4096x16384 by default, against
ggml's dense `mul_mat` over the same matrices and a plain read of 1 GiB on the same threads.
Another shape and fp32 weights can be chosen (fp32: the up projection alone, which is the
paper's Fig. 16 product at 4096x4096; this ggml's axpy reads fp16 or Q4_0 rows only).

Variants are (build, threads): PowerInfer's `native` (-march=native, AVX-512 where the CPU
has it) and `avx2` (-mavx2 -mfma -mf16c: the ISA of the papers' desktop CPUs, which have no
AVX-512) as processes of the driver, and ours (`sparse_cpu`: row, axpy, the fused
ffn_relu and our dense kernel) timed the same way in this process. Each round runs every
variant once (interleaved rounds, the harness's `interleaved`); a row is the median over
rounds of each run's median of `reps` graphs.
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import statistics
import subprocess
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


@dataclass(frozen=True)
class Workload:
    """What every build runs: the shape, the weight dtype, the graph's size and the
    sparsities."""

    d_model: int = 4096
    d_ffn: int = 16384
    dtype: str = "fp16"  # fp16 | fp32 (fp32: the up projection alone)
    layers: int = 4
    passes: int = 8
    reps: int = 5
    sparsities: tuple[float, ...] = (0.5, 0.8, 0.9, 0.95)

    @property
    def shape(self) -> str:
        return f"{self.d_model}x{self.d_ffn}"

    @property
    def up_only(self) -> bool:
        return self.dtype == "fp32"

    @property
    def element_size(self) -> int:
        return 4 if self.dtype == "fp32" else 2


DTYPES = {"fp16": "f16", "fp32": "f32"}  # ours -> the driver's argument


def run_driver(binary: Path, threads: int, work: Workload) -> DriverRun:
    argv = [str(binary), str(threads), str(work.layers), str(work.passes), str(work.reps),
            str(work.d_model), str(work.d_ffn), DTYPES[work.dtype],
            *(f"{s:g}" for s in work.sparsities)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired as err:
        raise RuntimeError(f"`{' '.join(argv)}` ran past {RUN_TIMEOUT_S} s") from err
    if done.returncode != 0:
        raise RuntimeError(f"`{' '.join(argv)}` exited with {done.returncode}:\n"
                           f"{done.stderr[-2000:]}")
    return parse_driver_output(done.stdout)


OURS = "sparse_cpu"  # the build name of our operators' rows


def sparse_cpu_run(threads: int, work: Workload, flush_mb: int = 256) -> DriverRun:
    """The driver's measurement with our operators (powerbench.ops `sparse_cpu`) in this
    process: the same shape and weight dtype, the same ops (fp32: the up projection alone),
    layers x passes per timed sequence, 256 MB read before each, the same GB/s accounting;
    dense = our dense kernel (`prepare_linear`).
    Each layer call of a sequence has its own random active rows, as each of the driver's
    layer-nodes has; ffn_relu gets a bias that keeps every active row's ReLU positive, so
    it reads every active down row as the driver's axpy does (its input is nonzero there).
    Its read_gbps is NaN: the report divides every build by the driver's own read (one
    read loop for all)."""
    import torch

    from powerbench.ops.bench_timing import Timer, TimingPolicy
    from powerbench.ops.huge_pages import use_huge_pages_all
    from powerbench.ops.registry import get_backend
    from powerbench.threads import torch_threads

    ops = get_backend(OURS, fallback=False)
    linear = ops.prepare_linear()
    gen = torch.Generator().manual_seed(0)
    layers, d_model, d_ffn, reps = work.layers, work.d_model, work.d_ffn, work.reps
    dtype = torch.float32 if work.dtype == "fp32" else torch.float16

    def weights(rows: int, cols: int) -> list[torch.Tensor]:
        return [((torch.rand(rows, cols, generator=gen) - 0.5) / 4).to(dtype)
                for _ in range(layers)]

    up = weights(d_ffn, d_model)
    down_t, down = ([], []) if work.up_only else (weights(d_ffn, d_model),
                                                  weights(d_model, d_ffn))
    use_huge_pages_all([*up, *down_t, *down])
    x, h = torch.rand(1, d_model, generator=gen), torch.rand(1, d_ffn, generator=gen)
    b1 = torch.full((d_ffn,), 100.0)  # |w1[i] . x| < 100 here: every ReLU stays positive
    nodes = layers * work.passes
    # the operator benchmark's timer: its flush is a single-threaded read (a torch.sum
    # flush leaves torch's workers spinning on the cores our kernels need: ops.bench_timing)
    timer = Timer("cpu", TimingPolicy(warmup=0, reps=reps, min_time_s=0.0, max_reps=reps,
                                      flush_mb=flush_mb))

    def timed(call) -> float:
        """Median seconds of one sequence: call(node, layer) for every layer-node."""
        def sequence() -> None:
            for node in range(nodes):
                call(node, node % layers)
        return timer.median(sequence)

    def timing(op: str, sparsity: float, rows: int, mats: int, seconds: float) -> OpTiming:
        nbytes = nodes * mats * rows * d_model * work.element_size
        return OpTiming(op, sparsity, rows, seconds / nodes * 1e3, nbytes / seconds / 1e9)

    with torch_threads(threads):
        found = [timing("dense_up", 0.0, d_ffn, 1, timed(lambda _, k: linear(x, up[k], None)))]
        if not work.up_only:
            found += [timing("dense_down", 0.0, d_ffn, 1, timed(
                          lambda _, k: linear(h, down[k], None))),
                      timing("dense_ffn", 0.0, d_ffn, 2, timed(
                          lambda _, k: linear(linear(x, up[k], None), down[k], None)))]
        for s in work.sparsities:
            n_active = round((1 - s) * d_ffn)
            ids = [torch.sort(torch.randperm(d_ffn, generator=gen)[:n_active]).values
                   for _ in range(nodes)]
            c = torch.rand(1, n_active, generator=gen)
            found.append(timing("sparse_up", s, n_active, 1, timed(
                lambda n, k, ids=ids: ops.row(up[k], x, ids[n], check=False))))
            if work.up_only:
                continue
            found += [
                timing("sparse_down", s, n_active, 1, timed(
                    lambda n, k, ids=ids, c=c: ops.axpy(down_t[k], c, ids[n], check=False))),
                timing("sparse_ffn", s, n_active, 2, timed(
                    lambda n, k, ids=ids: ops.ffn_relu(x, up[k], b1, down_t[k], None, ids[n],
                                                       check=False)))]
    return DriverRun(math.nan, tuple(found))


def report_rows(runs: dict[tuple[str, int], list[DriverRun]]) -> list[dict]:
    """One row per (build, threads, op, sparsity): medians over the rounds, GB/s per
    thread, GB/s as a share of the read bandwidth (the driver's read at that thread count,
    median over every driver run: one read loop for every build) and of the same build's
    dense FFN, and the time of the build's dense product (up, down or both) over this
    one's."""
    reads: dict[int, list[float]] = {}
    for (_, threads), procs in runs.items():
        reads.setdefault(threads, []).extend(p.read_gbps for p in procs
                                             if math.isfinite(p.read_gbps))
    rows = []
    for (build, threads), procs in runs.items():
        read = statistics.median(reads[threads]) if reads[threads] else math.nan
        cells: dict[tuple[str, float], list[OpTiming]] = {}
        for p in procs:
            for t in p.ops:
                cells.setdefault((t.op, t.sparsity), []).append(t)
        dense = cells.get(("dense_ffn", 0.0))
        dense_gbps = statistics.median(t.gbps for t in dense) if dense else float("nan")
        ms = {key: statistics.median(t.ms_per_layer for t in ts) for key, ts in cells.items()}
        for (op, sparsity), ts in cells.items():
            gbps = statistics.median(t.gbps for t in ts)
            dense_ms = ms.get((op.replace("sparse_", "dense_"), 0.0), math.nan)
            rows.append({
                "build": build, "threads": threads, "op": op,
                "sparsity_pct": round(100 * sparsity, 2), "active_rows": ts[0].active,
                "ms_per_layer": round(ms[(op, sparsity)], 4),
                "speedup_vs_dense": round(dense_ms / ms[(op, sparsity)], 3),
                "gbps": round(gbps, 2), "gbps_per_thread": round(gbps / threads, 2),
                "read_gbps": round(read, 2), "read_share": round(gbps / read, 3),
                "dense_ffn_share": round(gbps / dense_gbps, 3),
            })
    return rows


@dataclass(frozen=True)
class PowerInferOpsConfig:
    checkout: Path
    build_root: Path
    isas: tuple[str, ...] = ("native", "avx2")
    threads: tuple[int, ...] = (1, 2)
    work: Workload = Workload()
    rounds: int = 3
    ours: bool = True  # our sparse_cpu operators in the same rounds

    @property
    def report_name(self) -> str:
        """powerinfer_ops for the default shape and dtype, else with both appended."""
        default = Workload()
        same = (self.work.shape, self.work.dtype) == (default.shape, default.dtype)
        return "powerinfer_ops" + ("" if same else f"_{self.work.shape}_{self.work.dtype}")


def powerinfer_ops_report(cfg: PowerInferOpsConfig) -> Report:
    """Build each ISA variant, run every (build, threads) once per round (PowerInfer's as
    processes of the driver, ours in this process), and return the table (study
    operators_cpu, report powerinfer_ops)."""
    root = check_checkout(cfg.checkout)
    flags = cpu_flags()
    isas = tuple(i for i in cfg.isas if all(f in flags for f in NEEDS[i]))
    if not isas:
        raise PowerInferSourceError(f"this CPU runs none of the ISA builds {list(cfg.isas)} "
                                    f"(needs: {NEEDS}); task.isas=[native] always runs")
    binaries = {isa: build_driver(root, isa, cfg.build_root) for isa in isas}
    work = cfg.work
    runners = {isa: (lambda t, b=binaries[isa]: run_driver(b, t, work)) for isa in isas}
    if cfg.ours:
        runners[OURS] = lambda t: sparse_cpu_run(t, work)
    variants = {(build, t): (lambda run=run, t=t: run(t))
                for build, run in runners.items() for t in cfg.threads}
    results = interleaved({f"{b} x{t}": fn for (b, t), fn in variants.items()}, cfg.rounds)
    runs = {(b, t): results[f"{b} x{t}"] for b, t in variants}
    skipped = [i for i in cfg.isas if i not in isas]
    commit = checkout_commit(root)
    ops = "ggml_mul_mat_idx" if work.up_only else "ggml_mul_mat_idx, ggml_axpy"
    what = "up-projection operator" if work.up_only else "FFN operators"
    row_kib = work.d_model * work.element_size / 1024
    matrix_mib = work.d_model * work.d_ffn * work.element_size / 2**20
    return Report(
        study="operators_cpu", name=cfg.report_name, rows=report_rows(runs),
        key=("build", "threads", "op", "sparsity_pct"),
        title=f"PowerInfer's own CPU {what} ({ops}; {work.dtype}, {work.shape}, batch 1) "
              "beside ours, each against its dense product and a plain read, this machine",
        metrics=("gbps", "gbps_per_thread", "read_share", "dense_ffn_share",
                 "speedup_vs_dense", "ms_per_layer"),
        notes=[
            f"PowerInfer checkout at commit {commit} (the driver was written against "
            f"{PINNED_COMMIT}); its ggml compiled here with our driver "
            "(powerbench/measure/csrc/powerinfer_ffn_bench.c).",
            "build native / avx2 (PowerInfer's): sparse_up is ggml_mul_mat_idx over the rows "
            "whose predictor score passes the threshold, sparse_down ggml_axpy over the "
            "same rows of W_down^T, sparse_ffn both, dense_* ggml_mul_mat over every row"
            + (" (fp32: sparse_up and dense_up alone; this ggml's axpy reads fp16 or Q4_0 "
               "rows only). " if work.up_only else ". ") +
            f"build {OURS} (ours, powerbench.ops): "
            + ("row" if work.up_only else "row, axpy, the fused ffn_relu,") +
            f" and our dense kernel, on the same shape, {work.dtype} weights on 2 MiB pages "
            f"where the kernel allows. GB/s counts the rows read (active rows x {row_kib:g} "
            "KiB per matrix).",
            f"A graph (ours: a sequence of calls) runs {work.layers} layers ({matrix_mib:g} "
            f"MiB per matrix, each its own) {work.passes} times over: a graph costs more than its "
            "layers (on the 2-vCPU EPYC where this was written, one sparse layer alone "
            "took ~4 ms longer on two threads than inside a long graph), which PowerInfer "
            "pays once per token; a 256 MB read runs before each graph. Each layer-node (ours: "
            "each call) has its own random active rows, so a pass does not find the last "
            "pass's rows in the cache" + ("" if work.up_only else
                                          "; ours' ffn_relu gets a bias that keeps every "
                                          "active ReLU positive, so it reads every active "
                                          "down row, as the driver's axpy does") + ". "
            f"A process's figure is its median of {work.reps} graphs, a row the median over "
            f"{cfg.rounds} interleaved rounds.",
            "read_gbps: the driver's plain read of 1 GiB on that many threads, median over "
            "its processes (one read loop for every build); read_share = gbps / read_gbps; dense_ffn_share = gbps / the same build's dense "
            "FFN; speedup_vs_dense = the same build's dense time (up, down or FFN) / this.",
            "avx2: -mavx2 -mfma -mf16c, the SIMD level of the PowerInfer paper's desktop "
            "CPUs; native: -march=native.",
            *([f"Not run: {', '.join(skipped)} (this CPU lacks its instructions)."]
              if skipped else []),
        ],
        params={"isas": list(isas), "ours": cfg.ours, "threads": list(cfg.threads),
                "shape": work.shape, "dtype": work.dtype, "layers": work.layers,
                "passes": work.passes, "reps": work.reps, "rounds": cfg.rounds,
                "sparsities": list(work.sparsities), "powerinfer_commit": commit},
    )
