"""Typed schemas for the `engine` config group (plain dataclasses: no omegaconf import).

- `decoder`: our loop (`DecoderEngine`) with a dense FFN; `sparse`: the same loop with
  the neuron-aware `SparseFFN`; `hybrid`: PowerInfer's GPU + CPU FFN (`HybridEngine`).
  The flash engine's schema lives with the flash engine (`powerbench.flash.config`).
- `hf_generate`: transformers' `generate` baseline.

Every FFN is a typed `FFNConfig` subclass whose `_target_` names its class, written once
here (never in yaml); the engine builds it with the config's fields as keyword arguments
plus the context the class asks for (weights, predictors, placement, profile ...). A new
FFN is a class, an `FFNConfig` subclass, an engine schema whose `ffn` is that config, and
a yaml under conf/engine/.

Contradictions between settings fail when the config is composed, naming the settings and
what to use instead: an FFN that computes the neurons a predictor chooses
(`FFNConfig.needs_predictor`) without one, `engine.device` on a device the engine cannot
use, and (`EngineConfig.check_composed`, called once for the composed config at the job's
start, on the machine that runs it) a CUDA device that this machine does not have.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from powerbench.schema_helpers import ConfigRangeError, check_choice, check_range

DTYPES = ("fp32", "fp16", "bf16")  # engine.dtype (None: the model's own dtype)
DENSE_KERNELS = ("auto", "torch", "sparse_cpu")  # engine.dense_kernel (powerbench.engine.linear)
ACTIVE_MODES = ("auto", "predictor", "oracle", "dense")  # engine.ffn.active (hybrid)
CPU_PART_MODES = ("worker", "inline")  # engine.ffn.cpu_part (hybrid; engine.hybrid_cpu)


def check_cpu_parts(setting: str, parts: Sequence[str]) -> None:
    """A benchmark's list of CPU-part modes (a row each): known ones, each once."""
    if (not parts or len(set(parts)) < len(parts)
            or any(mode not in CPU_PART_MODES for mode in parts)):
        raise ConfigRangeError(f"{setting}={list(parts)}: one or more of "
                               f"{', '.join(CPU_PART_MODES)}, each once")
# engine.device (None: where the model is): torch's CPU or a CUDA device
DEVICE = re.compile(r"cpu|cuda(:\d+)?")
DEVICES = "cpu, cuda, cuda:<index>"


def check_device(setting: str, value: str | None) -> None:
    """ConfigRangeError naming `setting` unless `value` is None, cpu or cuda[:<index>]."""
    if value is not None and not DEVICE.fullmatch(value):
        raise ConfigRangeError(f"{setting}={value!r} is not a device; valid: {DEVICES} (a "
                               f"GPU is {setting}=cuda; unset: where the model is)")


def on_cuda(device: str | None) -> bool:
    return device is not None and device.startswith("cuda")


def check_sparse_backend(setting: str, value: str) -> None:
    from powerbench.ops.registry import BACKENDS  # torch: imported only to check

    check_choice(setting, value, BACKENDS)


@dataclass
class FFNConfig:
    """Base of every FFN's typed config: `_target_` is the FFN class."""

    _target_: str = "powerbench.engine.ffn.DenseFFN"
    # the FFN computes the neurons a predictor chooses (the engine needs predictor=...)
    needs_predictor: ClassVar[bool] = False


def ffn_node(cfg: FFNConfig) -> dict[str, Any]:
    """The FFN's `_target_` and keyword arguments (`powerbench.build.instantiate` builds it)."""
    if not isinstance(cfg, FFNConfig):
        raise TypeError(f"engine.ffn must be a typed FFNConfig (got {type(cfg).__name__}): "
                        "define a dataclass subclass of powerbench.engine.config.FFNConfig")
    return {f.name: getattr(cfg, f.name) for f in fields(cfg)}


@dataclass
class DenseFFNConfig(FFNConfig):
    _target_: str = "powerbench.engine.ffn.DenseFFN"


@dataclass
class SparseFFNConfig(FFNConfig):
    """`SparseFFN`: the predictors choose each step's active neurons; `backend` computes them
    (sparse_cpu | sparse_cuda | sparse_torch; one that cannot be built falls back)."""

    _target_: str = "powerbench.engine.sparse.SparseFFN"
    needs_predictor: ClassVar[bool] = True
    backend: str = "sparse_cpu"
    dense_from_rows: int = 32  # calls of >= this many rows (prompts) run the dense FFN

    def __post_init__(self) -> None:
        check_sparse_backend("engine.ffn.backend", self.backend)
        check_range("engine.ffn.dense_from_rows", self.dense_from_rows, 1)


@dataclass
class HybridFFNConfig(FFNConfig):
    """`HybridFFN`: hot neurons on the GPU, cold on the CPU, following the placement."""

    _target_: str = "powerbench.engine.hybrid.HybridFFN"
    active: str = "auto"  # auto (predictors if built, else oracle) | predictor | oracle | dense
    gpu_backend: str = "sparse_cuda"
    cpu_backend: str = "sparse_cpu"
    cpu_threads: str = "auto"  # the CPU part's threads: auto (measured) or a count
    # worker: the CPU part on a worker thread, beside the GPU part's launches; inline: on the
    # decoder's thread once the GPU part is issued (no thread hand-off)
    cpu_part: str = "worker"

    def __post_init__(self) -> None:
        check_choice("engine.ffn.active", self.active, ACTIVE_MODES)
        check_choice("engine.ffn.cpu_part", self.cpu_part, CPU_PART_MODES)
        check_sparse_backend("engine.ffn.gpu_backend", self.gpu_backend)
        check_sparse_backend("engine.ffn.cpu_backend", self.cpu_backend)
        threads = str(self.cpu_threads)
        if threads != "auto" and not (threads.isdigit() and int(threads) >= 1):
            raise ConfigRangeError(f"engine.ffn.cpu_threads={self.cpu_threads!r}: valid: auto "
                                   "(measured) or a thread count >= 1")


@dataclass
class EngineConfig:
    _target_: str = "powerbench.engine.decoder_engine.DecoderEngine"
    name: str = "dense"
    dtype: str | None = None  # fp32 | fp16 | bf16; None: the model's own dtype
    device: str | None = None  # cpu | cuda | cuda:N (a GPU index); None: where the model is
    # sampling (used when bench.greedy is false)
    temperature: float = 1.0
    top_k: int = 0  # 0: off
    top_p: float = 1.0  # 1.0: off
    seed: int = 0

    def __post_init__(self) -> None:
        check_choice("engine.dtype", self.dtype, DTYPES)
        check_device("engine.device", self.device)
        check_range("engine.top_k", self.top_k, 0)
        check_range("engine.top_p", self.top_p, 0.0, 1.0, low_open=True)

    def check_composed(self, predictor: Any) -> None:
        """The engine against the rest of the composed config (`predictor`: its predictor
        node, None if unset) and this machine: ConfigRangeError naming the settings and
        what to use instead. Called once, when the job's config is typed (on the machine
        that runs it: a config composed without a GPU may run on one)."""
        from powerbench.predictor.config import NoneConfig

        ffn = getattr(self, "ffn", None)
        if getattr(ffn, "needs_predictor", False) and (
                predictor is None or isinstance(predictor, NoneConfig)):
            raise ConfigRangeError(
                f"engine={self.name} computes the neurons a predictor chooses and "
                f"predictor={getattr(predictor, 'name', 'none')} chooses none: add "
                "predictor=fixed, adaptive or oracle (the dense baseline is engine=dense)")
        if on_cuda(self.device):
            import torch

            if not torch.cuda.is_available():
                raise ConfigRangeError(
                    f"engine.device={self.device!r}: this machine has no CUDA device "
                    f"(torch {torch.__version__}, {torch.version.cuda or 'CPU-only'} build); "
                    f"here use engine.device=cpu (or leave it unset), or run on a GPU machine")


@dataclass
class DecoderEngineConfig(EngineConfig):
    # dense projections (attention, output projection, dense FFN): auto | torch | sparse_cpu
    # (auto: the sparse_cpu matrix-vector kernel for calls of <= dense_kernel_max_rows rows
    # on the CPU when the extension builds, else F.linear; sparse_cpu: the same, with a
    # warning when it cannot be built; powerbench.engine.linear)
    dense_kernel: str = "auto"
    dense_kernel_max_rows: int = 8
    huge_pages: bool = True  # weights on 2 MiB pages (powerbench.engine.weights.use_huge_pages)
    ffn: FFNConfig = field(default_factory=DenseFFNConfig)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("engine.dense_kernel", self.dense_kernel, DENSE_KERNELS)
        check_range("engine.dense_kernel_max_rows", self.dense_kernel_max_rows, 0)
        why = self.cpu_only()
        if on_cuda(self.device) and why:
            raise ConfigRangeError(
                f"engine.device={self.device!r}: {why}; valid: engine.device=cpu or unset "
                "(on a GPU: engine=sparse_cuda engine.device=cuda)")

    def cpu_only(self) -> str | None:
        """Why this engine's FFN computes on the CPU whatever engine.device says (None:
        it follows the device)."""
        if getattr(self.ffn, "backend", None) == "sparse_cpu":
            return (f"engine.ffn.backend=sparse_cpu (engine={self.name}) computes the FFN "
                    "on the CPU")
        return None


@dataclass
class SparseEngineConfig(DecoderEngineConfig):
    name: str = "sparse_cpu"
    ffn: SparseFFNConfig = field(default_factory=SparseFFNConfig)


@dataclass
class HybridEngineConfig(DecoderEngineConfig):
    _target_: str = "powerbench.engine.hybrid.HybridEngine"
    # its GPU neurons are a placement's (solver=..., hardware=...: PowerbenchConfig checks)
    needs_placement: ClassVar[bool] = True
    name: str = "hybrid"
    dtype: str | None = "fp16"
    device: str | None = "cuda"
    ffn: HybridFFNConfig = field(default_factory=HybridFFNConfig)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.device is not None and not on_cuda(self.device):
            raise ConfigRangeError(f"engine.device={self.device!r}: engine=hybrid runs "
                                   "attention and the hot neurons on the GPU; valid: "
                                   "engine.device=cuda or cuda:<index>")

    def check_composed(self, predictor: Any) -> None:
        """As every engine's, and a machine without CUDA stops here with what runs
        instead (powerbench.engine.hybrid.NO_CUDA)."""
        from powerbench.engine.hybrid import require_cuda

        try:
            require_cuda()
        except RuntimeError as err:
            raise ConfigRangeError(str(err)) from None
        super().check_composed(predictor)


@dataclass
class HFGenerateConfig(EngineConfig):
    _target_: str = "powerbench.engine.hf_generate.HFGenerateEngine"
    name: str = "hf_generate"


SCHEMAS = {"decoder": DecoderEngineConfig, "sparse": SparseEngineConfig,
           "hybrid": HybridEngineConfig, "hf_generate": HFGenerateConfig}
