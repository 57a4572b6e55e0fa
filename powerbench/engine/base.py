"""What every engine shares: the result type, the engine protocol, small model helpers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch import Tensor

from powerbench.engine.sampling import SamplingConfig
from powerbench.engine.timing import RunTiming, summarize

if TYPE_CHECKING:  # these import omegaconf; the engine must import with torch alone
    from powerbench.config.schema import BenchConfig
    from powerbench.model.loading import LoadedModel

TORCH_DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
}
DTYPE_NAMES: dict[torch.dtype, str] = {v: k for k, v in TORCH_DTYPES.items()}


@dataclass
class EngineResult:
    """One engine measurement. `metrics` names: see `powerbench.engine.timing`."""

    engine: str
    metrics: dict[str, float]
    threads: int
    dtype: str
    device: str
    batch_size: int
    prompt_tokens: int
    new_tokens: int
    token_ids: list[list[int]]  # generated ids per row (last timed run)
    texts: list[str]  # the same, decoded (sanity print)
    runs: list[RunTiming] = field(default_factory=list)  # raw timings of the timed repeats
    extra: dict[str, Any] = field(default_factory=dict)


class Engine(Protocol):
    name: str

    def run(self, loaded: LoadedModel, input_ids: Tensor, bench: BenchConfig,
            **context: Any) -> EngineResult:
        """Generate bench.new_tokens for input_ids [B, P] with warm-up and timed repeats."""
        ...


@dataclass(frozen=True)
class SamplingParams:
    """The engine-level sampling knobs (used when bench.greedy is false)."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0

    def config(self, greedy: bool, suppress_ids: tuple[int, ...] = ()) -> SamplingConfig:
        return SamplingConfig(greedy=greedy, temperature=self.temperature, top_k=self.top_k,
                              top_p=self.top_p, seed=self.seed, suppress_ids=suppress_ids)


def torch_dtype(name: str | None, default: torch.dtype) -> torch.dtype:
    if name is None:
        return default
    if name not in TORCH_DTYPES:
        raise ValueError(f"engine dtype {name!r} unsupported; choose from {sorted(TORCH_DTYPES)}")
    return TORCH_DTYPES[name]


def dtype_name(dtype: torch.dtype) -> str:
    return DTYPE_NAMES.get(dtype, str(dtype).removeprefix("torch."))


def model_device(model: Any) -> torch.device:
    return next(model.parameters()).device


def model_dtype(model: Any) -> torch.dtype:
    return next(model.parameters()).dtype


def eos_token_ids(model: Any) -> tuple[int, ...]:
    """EOS ids of an HF model (generation config first), as a tuple."""
    gen = getattr(model, "generation_config", None)
    eos = getattr(gen, "eos_token_id", None)
    if eos is None:
        eos = getattr(model.config, "eos_token_id", None)
    if eos is None:
        return ()
    return tuple(int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos]))


def make_result(engine: str, runs: list[RunTiming], tokens: Tensor, tokenizer: Any,
                bench: BenchConfig, prompt_tokens: int, dtype: torch.dtype,
                device: torch.device, extra: dict[str, Any] | None = None) -> EngineResult:
    batch = tokens.shape[0]
    ids = tokens.tolist()
    texts = (tokenizer.batch_decode(ids, skip_special_tokens=True)
             if tokenizer is not None else [])
    return EngineResult(
        engine=engine,
        metrics=summarize(runs, batch=batch, prompt_tokens=prompt_tokens),
        threads=torch.get_num_threads(),
        dtype=dtype_name(dtype),
        device=str(device),
        batch_size=batch,
        prompt_tokens=prompt_tokens,
        new_tokens=tokens.shape[1],
        token_ids=ids,
        texts=texts,
        runs=runs,
        extra=extra or {},
    )
