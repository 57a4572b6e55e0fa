"""Typed schemas of the `task` config group: what one `powerbench` invocation does.

`powerbench [overrides]` runs `task=run` (the pipeline); `powerbench <task> [overrides]`
is `powerbench task=<task> [overrides]`. Every task is built as
`build(cfg.task, cfg, out_dir)` inside the one Hydra app (run dir, --multirun, --cfg,
MLflow), with the task's options under `task.` (e.g. `task.rounds=41`).
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field
from typing import Any

from powerbench.schema_helpers import check_choice, check_range, parse_shape
from powerbench.simulator.config import PrefillMode


@dataclass
class RunTask:
    """The experiment pipeline (powerbench.pipeline.run_experiment)."""

    _target_: str = "powerbench.tasks.run.run"
    name: str = "run"


@dataclass
class TourTask:
    """The whole idea in one table (`make run`): measured dense vs sparse on this machine,
    simulated placement and speed for a paper-scale model on a hardware profile."""

    _target_: str = "powerbench.tasks.tour.tour"
    name: str = "tour"
    rounds: int = 9  # interleaved dense / sparse decode rounds
    backend: str = "sparse_cpu"
    eval_tokens: int = 8192  # held-out tokens for perplexity (dense and sparse)
    mc_items: int = 100
    sim_model: str = "opt_30b"  # conf/model option (shape-only: simulated)
    sim_hardware: str = "pc_high"


@dataclass
class ValidateTask:
    """Measured engines vs their simulated twins on hardware=local."""

    _target_: str = "powerbench.tasks.validate.validate"
    name: str = "validate"
    # synthetic weights only: `dense` and sparse backends measured side by side (with the
    # trained model the engine is the `engine` group: powerbench -m validate engine=a,b)
    engines: list[str] = field(default_factory=lambda: ["dense", "sparse_cpu"])
    calibrate: bool = True  # re-measure the CPU rates around the engine rounds
    rounds: int = 12  # engine runs per engine, calibrations before, between and after
    figure: bool = True  # draw the figure (measured vs simulated) beside the report
    publish: bool = False  # also write the report into results/validation/
    # real-size shapes, SYNTHETIC (seeded random) weights, as bench-decode: only speed counts.
    # A model config with a `spec` (shapes), chosen as model@task.synthetic_model=opt_6_7b;
    # its keys override as task.synthetic_model.spec.d_model=64 (None: off)
    synthetic_model: Any = None
    dtype: str = "fp16"  # fp16 | fp32 (synthetic weights only)
    layers: int | None = None  # cap the synthetic model's layers (memory/time); None: all
    seed: int = 0  # synthetic weights, prompt and activation trace


@dataclass
class BenchDecodeTask:
    """Dense vs sparse decoders sharing one set of weights, interleaved round by round."""

    _target_: str = "powerbench.tasks.bench_decode.bench_decode"
    name: str = "bench_decode"
    rounds: int = 15
    predictors: list[str] = field(default_factory=lambda: ["fixed", "adaptive", "oracle"])
    # the predictor configs the names above (and `unfused`) pick from, composed by Hydra from
    # conf/predictor in the task yaml; override as task.predictor_configs.fixed.rank=32
    predictor_configs: dict[str, Any] = field(default_factory=dict)
    backend: str = "sparse_cpu"
    unfused: str | None = "adaptive"  # also time this predictor unfused (None: skip)
    publish: bool = False  # also write the report into results/decode/
    # real-size shapes, synthetic (seeded random) weights: only speed is meaningful. A model
    # config with a `spec` (shapes), chosen as model@task.synthetic_model=opt_6_7b; its keys
    # override as task.synthetic_model.spec.d_model=64 (None: off, the experiment's model)
    synthetic_model: Any = None
    dtype: str = "fp16"  # fp16 | fp32 (synthetic weights only)
    layers: int | None = None  # cap the synthetic model's layers (memory/time); None: all
    seed: int = 0  # synthetic weights, prompt and activation trace
    predictor_rank: int = 0  # > 0: also time a random low-rank predictor's cost (synthetic)
    # also time the dense decoder with every projection in F.linear (engine "dense F.linear"),
    # beside the default dense kernel (powerbench.engine.linear)
    torch_linear_baseline: bool = False
    # sparse_cpu knob settings, each engine timed once per setting in the same rounds, every
    # kernel call of its generations under it (bench-operators' syntax:
    # [default,wide_adjacent_pct:0]; measure.decode_bench.KnobDecoder)
    variants: list[str] | None = None


@dataclass
class TimingOptions:
    """Per-measurement timing; None keeps the benchmark's policy (full or quick)."""

    warmup: int | None = None  # untimed calls before each measurement
    reps: int | None = None  # minimum timed calls per measurement
    min_time_s: float | None = None  # minimum timed seconds per measurement
    flush_mb: int | None = None  # cache-flush buffer before each call (0: off)
    cuda_graph: bool | None = None  # CUDA: time each call replayed from a captured graph


@dataclass
class BenchOperatorsTask:
    """Sparse operators vs the best dense kernel, side by side (powerbench.ops.bench)."""

    _target_: str = "powerbench.tasks.bench_operators.bench_operators"
    name: str = "bench_operators"
    quick: bool = False  # 4096x16384 fp32 batch 1, 4 sparsities (under a minute)
    device: str = "cpu"
    shapes: list[str] | None = None  # d_model x d_ffn, e.g. 4096x16384 (None: the defaults)
    dtypes: list[str] | None = None
    batches: list[int] | None = None
    sparsities: list[float] | None = None
    ops: list[str] | None = None
    # sparse_torch, sparse_cpu, sparse_cuda, and the conventional CSR baselines torch_csr,
    # torch_csr_i32 (CPU, fp32; ops.csr_baseline) (None: sparse_torch and the device's own)
    backends: list[str] | None = None
    isas: list[str] | None = None  # sparse_cpu ISA paths timed side by side (None: the loaded one)
    variants: list[str] | None = None  # sparse_cpu knob settings timed side by side (ops.cpu_knobs)
    timing: TimingOptions = field(default_factory=TimingOptions)
    bandwidth_mb: int | None = None
    threads: int = 0  # torch threads (0: torch's default)
    huge_pages: bool = True  # weights (dense and sparse alike) advised onto 2 MiB pages
    # results into tensors allocated once per cell (out=), dense and sparse alike (False:
    # every call allocates its result)
    out_buffers: bool = True
    tag: str | None = None  # report name suffix (None: "_quick" with quick)
    plot: bool = True
    publish: bool = False  # also write the report into results/operators_<device>/

    def __post_init__(self) -> None:
        for shape in self.shapes or ():
            parse_shape("task.shapes", shape)


@dataclass
class BenchPowerInferOpsTask:
    """PowerInfer's own CPU FFN operators (its ggml from a PowerInfer checkout, compiled
    here) beside ours, each against its dense product and one plain read
    (powerbench.measure.powerinfer_ops)."""

    _target_: str = "powerbench.tasks.bench_powerinfer_ops.bench_powerinfer_ops"
    name: str = "bench_powerinfer_ops"
    powerinfer_dir: str | None = None  # a PowerInfer checkout (git clone .../SJTU-IPADS/PowerInfer)
    isas: list[str] = field(default_factory=lambda: ["native", "avx2"])  # compiler ISA builds
    threads: list[int] | None = None  # None: 1, 2, 4, ... and all usable cores
    layers: int = 4  # distinct layers, each with its own 3 x 128 MiB of weights
    passes: int = 8  # a graph runs the layers this many times (amortises the graph's own cost)
    reps: int = 5  # graphs per process (its median)
    rounds: int = 3  # interleaved rounds of every (build, threads) run
    sparsities: list[float] = field(default_factory=lambda: [0.5, 0.8, 0.9, 0.95])
    # d_model x d_ffn; fp16 | fp32 (fp32: the up projection alone, e.g. 4096x4096 fp32 is
    # PowerInfer's Fig. 16 product; report powerinfer_ops_<shape>_<dtype> unless the default)
    shape: str = "4096x16384"
    dtype: str = "fp16"
    ours: bool = True  # our sparse_cpu operators timed the same way, in the same rounds
    publish: bool = False  # also write the report into results/operators_cpu/

    def __post_init__(self) -> None:
        from powerbench.measure.powerinfer_ops import DTYPES, ISA_FLAGS

        check_choice("task.dtype", self.dtype, tuple(DTYPES))
        d_model, d_ffn = self.dims
        check_range("task.shape's d_model", d_model, 64)
        # ggml_mul_mat_idx gathers rows only above 1000 neurons (PowerInfer's ggml.c)
        check_range("task.shape's d_ffn", d_ffn, 1000, low_open=True)
        for isa in self.isas:
            check_choice("task.isas", isa, tuple(ISA_FLAGS))
        for t in self.threads or ():
            check_range("task.threads", t, 1, 256)
        for s in self.sparsities:
            check_range("task.sparsities", s, 0.0, 1.0)
        check_range("task.layers", self.layers, 1, 64)
        check_range("task.passes", self.passes, 1, 64 // self.layers)
        check_range("task.reps", self.reps, 1, 64)
        check_range("task.rounds", self.rounds, 1)

    @property
    def dims(self) -> tuple[int, int]:
        """task.shape as (d_model, d_ffn)."""
        return parse_shape("task.shape", self.shape)


@dataclass
class BenchHybridTask:
    """engine=hybrid vs llama.cpp-style layer offload on a real-size shape with synthetic
    weights, each row beside its simulated twin (powerbench.measure.hybrid_bench; needs a
    CUDA GPU)."""

    _target_: str = "powerbench.tasks.bench_hybrid.bench_hybrid"
    name: str = "bench_hybrid"
    # a model config with a `spec` section (shapes): model@task.synthetic_model=<option>
    # (task yaml default opt_6_7b)
    synthetic_model: Any = None
    layers: int = 8  # evenly spaced over the model's depth
    gpu_ffn_shares: list[float] = field(default_factory=lambda: [0.25, 0.5])
    rounds: int = 5
    prompt_tokens: int = 16
    new_tokens: int = 32
    batch: int = 1
    threads: int = 8  # CPU workers of the CPU part
    # the hybrid rows' CPU-part modes (engine.ffn.cpu_part), each its own row: worker | inline
    cpu_parts: list[str] = field(default_factory=lambda: ["worker", "inline"])
    simulate: bool = True  # measure the local profile (GPU included) and add the twin
    publish: bool = False  # also write the report into results/hybrid_gpu/

    def __post_init__(self) -> None:
        from powerbench.engine.config import check_cpu_parts

        check_cpu_parts("task.cpu_parts", self.cpu_parts)


@dataclass
class BenchSolverTask:
    """Placement solvers (ILP vs greedy) at paper scale on synthetic profiles: one job per
    model x hardware x solver cell of a Hydra sweep (`powerbench -m bench-solver`; the
    grid is the task yaml's `hydra.sweeper.params`), collected into one table."""

    _target_: str = "powerbench.tasks.bench_solver.bench_solver"
    name: str = "bench_solver"
    publish: bool = False  # also write the (collected) report into results/solver/


@dataclass
class BenchFlashTask:
    """PowerInfer-2's flash-offloaded FFN (engine=flash), measured (synthetic weights).

    `mode`: "ffn" (default): FFN-only and whole decode steps at several DRAM budgets vs
    the in-DRAM sparse FFN, with the bundling / pipelining / I/O variants, on an
    in-DRAM-capable shape (`layers` x `d_model` x `d_ffn`, `decode_model`).
    "capped": `model` (e.g. llama_reglu_13b) decoded with its FFN only in the flash file
    under a memory cgroup of `cap_fraction` of the model, against llama.cpp's mmap in the
    same cap, at the model's published sparsity and `sparser_model`'s; plus the
    Fig. 14-order ablation on `ablation_model` at `ablation_budget` (powerbench.measure.
    flash_capped_runs). "lookahead_recall": how well layer l's FFN input predicts layer l+1's
    active neurons on a real model (`recall_model_dir`). "predict_local": the simulator's
    flash tier against the measured report `predict_report`.
    """

    _target_: str = "powerbench.tasks.bench_flash.bench_flash"
    name: str = "bench_flash"
    mode: str = "ffn"  # ffn | capped | lookahead_recall | predict_local
    publish: bool = False  # also write the report into results/flash/
    seed: int = 0
    # ---- mode=ffn ----
    tokens: int = 32  # decode steps per round
    rounds: int = 3
    warmup: int = 16
    io_threads: int = 16
    hot_fraction: float = 0.5
    layers: int = 24  # OPT-1.3B-shaped by default
    d_model: int = 2048
    d_ffn: int = 8192
    dtype: str = "fp16"  # fp16 | fp32
    budgets: list[float] = field(default_factory=lambda: [1.0, 0.5, 0.25, 0.1])
    # whole decode steps of this model's shape (model@task.decode_model=<option>, task yaml
    # default opt_1_3b; ~model@task.decode_model: FFN only)
    decode_model: Any = None
    decode_tokens: int = 16  # whole decode steps per round (at most `tokens`)
    # ---- mode=capped ---- (its models are conf/model options the task yaml picks; choose
    # one as model@task.model=<option>, override its keys as task.model.spec.d_model=256)
    model: Any = None  # a model config with a `spec` (task yaml: llama_reglu_13b)
    model_layers: int | None = None  # keep the first N layers (rehearsals, tests)
    # its published sparsity, sparser (task yaml: prosparse_llama2_7b; ~model@task.sparser_model
    # skips it)
    sparser_model: Any = None
    cap_fraction: float = 0.6  # the memory cgroup limit, of the model's weight bytes
    budgets_gb: list[float] = field(default_factory=lambda: [2.0, 4.0])  # FFN cache DRAM
    prompt_tokens: int = 4
    new_tokens: int = 5  # tokens/s over the new_tokens - 1 steps after the first
    capped_rounds: int = 2
    threads: int = 2
    predictor_rank: int = 64  # the seeded predictor MLP run (and charged) per layer call
    rss_slack_gb: float = 1.0  # the resident guard's slack beyond dense + budget + scratch
    llamacpp: bool = True  # the llama.cpp peer (needs `make llamacpp`)
    # the Fig. 14-order ablation (task yaml: opt_1_3b; ~model@task.ablation_model skips it)
    ablation_model: Any = None
    ablation_budget: float = 0.5  # of the ablation model's FFN bytes
    ablation_allowance_gb: float = 1.0  # its cap = dense + budget + this (runtime, scratch)
    ablation_new_tokens: int = 17
    ablation_rounds: int = 3
    work_dir: str | None = None  # large files (null: <cache_dir>/flash/capped)
    keep_files: bool = False  # keep the multi-GB files after the run
    # ---- mode=lookahead_recall ----
    recall_model_dir: str | None = None  # an HF model dir (null: the SmolLM2-135M GGUF's)
    recall_fractions: list[float] = field(default_factory=lambda: [0.03, 0.1])
    # ---- mode=predict_local ----
    predict_report: str | None = None  # a bench-flash mode=ffn report (.txt)
    predict_fit: str = "mean"  # mean | median (the unit-cost fit)


@dataclass
class BenchThresholdTask:
    """CATS threshold sparsity on a pretrained SiLU model: accuracy vs decode speed, with
    llama.cpp beside it when llama-cpp-python is installed (`make llamacpp`)."""

    _target_: str = "powerbench.tasks.bench_threshold.bench_threshold"
    name: str = "bench_threshold"
    sparsities: list[float] = field(default_factory=lambda: [0.0, 0.25, 0.4, 0.5, 0.65])
    fp16_sparsities: list[float] = field(default_factory=lambda: [0.5])  # also timed in fp16
    rounds: int = 7
    eval_tokens: int = 4096
    mc_items: int = 100
    calibration_tokens: int = 4096
    llamacpp: bool = True  # time llama.cpp too (when it is installed)
    # also time our dense decoder with every projection in F.linear (engine ours-dense-torch)
    torch_linear_baseline: bool = False
    # also time our dense decoder without the fused decode operators (RMSNorm, attention,
    # gated activation: powerbench.engine.decode_kernels), engine ours-dense-unfused
    unfused_baseline: bool = False
    publish: bool = False  # also write the report into results/threshold/


@dataclass
class FigureTask:
    """Regenerate figures from MLflow runs (<figure>.csv and .png): into the run directory's
    figures/, or with `publish` into results/ (the published pages' files)."""

    _target_: str = "powerbench.tasks.figure.figure"
    name: str = "figure"
    figures: list[str] = field(default_factory=list)  # empty: every figure
    out_dir: str | None = None  # None: <run dir>/figures/ (results/ with publish=true)
    publish: bool = False  # write into results/ (what the docs cite), replacing its files


@dataclass
class ReproduceTask:
    """Reproduce the papers' figures/tables (powerbench.reproduce): sweep, figure, the
    report results/reproduction/README.md."""

    _target_: str = "powerbench.tasks.reproduce.reproduce"
    name: str = "reproduce"
    # target names (`all`: every target); `builtins.list`: the field `list` shadows the name
    targets: builtins.list[str] = field(default_factory=builtins.list)
    list: bool = False  # print the targets and exit (`--list`)
    quick: bool = False  # each target's reduced sweep (`--quick`)
    # parallel jobs of each sweep (hydra/launcher=parallel); 1: one job after another in the
    # sweep's own process (hydra/launcher=basic, no worker processes to start)
    n_jobs: int = 2
    # simulated targets whose children run at once (measured ones always run alone); 0: as
    # many as the cores hold with n_jobs jobs each (cores // n_jobs, at least 1)
    parallel_targets: int = 0
    out_dir: str | None = None  # figures, CSVs and README.md (None: results/reproduction/)
    fresh_store: bool = False  # log to a new MLflow store in the run directory
    report_only: bool = False  # run nothing: redraw every figure and the report from the store

    def __post_init__(self) -> None:
        check_range("task.parallel_targets", self.parallel_targets, 0)


@dataclass
class HybridLocalTask:
    """engine=hybrid measured on this machine's GPU + CPU beside its simulated twin."""

    _target_: str = "powerbench.tasks.hybrid_local.hybrid_local"
    name: str = "hybrid_local"
    gpu_budget_mb: float = 8.0  # GPU memory the placement may use (so the model does not fit)
    publish: bool = False  # also write the report into results/hybrid_local/


@dataclass
class ConstantsTask:
    """docs/constants.md from the constants registry (powerbench.simulator.constants)."""

    _target_: str = "powerbench.tasks.constants.constants"
    name: str = "constants"
    out: str | None = None  # None: docs/constants.md of the checkout
    # also MEASURE the token-to-token overlap of active neurons (tiny_relu; SmolLM2 at each
    # CATS sparsity) into results/calibration/token_overlap.csv (minutes of CPU)
    overlap: bool = False
    # the models traced (conf/model options composed in the task yaml: tiny_relu, smollm2_135m)
    overlap_models: dict[str, Any] = field(default_factory=dict)
    overlap_tokens: int = 2048  # consecutive tokens traced per model (sequences of 128)
    overlap_cats_sparsity: list[float] = field(default_factory=lambda: [
        0.5, 0.7, 0.8, 0.9, 0.95, 0.97])


@dataclass
class SensitivityTask:
    """Calibration rows (sourced constants vs the previous fitted factors) and each row's
    change when each constant moves by `step` (results/calibration/)."""

    _target_: str = "powerbench.tasks.sensitivity.sensitivity"
    name: str = "sensitivity"
    step: float = 0.2
    out_dir: str | None = None  # None: results/calibration
    # the constants before they were sourced (the before/after table)
    previous: dict[str, float] = field(default_factory=lambda: {
        "gpu_dense": 0.4, "gpu_sparse": 0.2, "int4": 0.5, "int4_axpy": 1.0, "host_layer_us": 0.0,
        "hybrid_roundtrip_us": 0.0, "hybrid_merges": 1.0, "token_overlap": 0.0})
    # shown beside `ours`: the runs whose prompt goes through the neuron-aware operators
    # (prefill hybrid) re-costed with this prefill mode (powerinfer_public: as the public
    # code's batch loops read rows); null: no such column
    alternative_prefill: str | None = "powerinfer_public"
    # row label prefix -> the mechanism a row that stays off lacks, and what would settle it
    missing: dict[str, str] = field(default_factory=dict)
    validation_batches: int = 11  # newest real-size `validate` reports (results/validation/) shown
    page_only: bool = False  # redraw README.md from the CSVs (no simulation)

    def __post_init__(self) -> None:
        check_choice("task.alternative_prefill", self.alternative_prefill,
                     [m.value for m in PrefillMode])


@dataclass
class SyncTask:
    """Upload the runs queued while the tracking server was unreachable."""

    _target_: str = "powerbench.tasks.sync.sync"
    name: str = "sync"


@dataclass
class MlflowServerTask:
    """A shared MLflow server on PostgreSQL (loopback by default), until interrupted."""

    _target_: str = "powerbench.tasks.mlflow_server.mlflow_server"
    name: str = "mlflow_server"
    host: str = "127.0.0.1"
    port: int = 5000
    pg_port: int = 5433
    data_dir: str | None = None  # PostgreSQL cluster + artifacts (None: <cache>/mlflow-server)


@dataclass
class UiTask:
    """`powerbench ui [URI]`: print the command that opens MLflow's dashboard on the tracking
    store URI (the argument sets tracking.uri; default: the embedded SQLite store) and the
    direct link to the experiment's runs."""

    _target_: str = "powerbench.tasks.ui.ui"
    name: str = "ui"


@dataclass
class DocsTask:
    """Regenerate the generated docs pages: docs/configuration.md (from the typed schemas)
    and docs/metrics.md (from the metric registry, powerbench.tracking.metrics)."""

    _target_: str = "powerbench.tasks.docs.docs"
    name: str = "docs"
    out_dir: str | None = None  # None: docs/ of the source checkout


SCHEMAS = {"run": RunTask, "tour": TourTask, "validate": ValidateTask, "bench_decode": BenchDecodeTask,
           "bench_operators": BenchOperatorsTask, "bench_solver": BenchSolverTask,
           "bench_hybrid": BenchHybridTask, "bench_powerinfer_ops": BenchPowerInferOpsTask,
           "hybrid_local": HybridLocalTask, "bench_flash": BenchFlashTask,
           "bench_threshold": BenchThresholdTask, "figure": FigureTask,
           "reproduce": ReproduceTask, "sync": SyncTask, "mlflow_server": MlflowServerTask,
           "ui": UiTask, "docs": DocsTask, "constants": ConstantsTask,
           "sensitivity": SensitivityTask}
