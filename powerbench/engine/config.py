"""Typed schemas for the `engine` config group (plain dataclasses: no omegaconf import).

- `decoder`: our loop (`DecoderEngine`) with the FFN named by `ffn._target_`
  (`dense`: DenseFFN; the sparse engines: a sparse FFN class plus its parameters).
- `hf_generate`: transformers' `generate` baseline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class EngineConfig:
    _target_: str = "powerbench.engine.decoder_engine.DecoderEngine"
    name: str = "dense"
    dtype: str | None = None  # fp32 | fp16 | bf16; None: the model's own dtype
    device: str | None = None  # e.g. cpu, cuda; None: where the model is
    # sampling (used when bench.greedy is false)
    temperature: float = 1.0
    top_k: int = 0  # 0: off
    top_p: float = 1.0  # 1.0: off
    seed: int = 0


def _dense_ffn() -> dict[str, Any]:
    return {"_target_": "powerbench.engine.ffn.DenseFFN"}


@dataclass
class DecoderEngineConfig(EngineConfig):
    # dense projections (attention, output projection, dense FFN): auto | torch | sparse_cpu
    # (auto: the sparse_cpu matrix-vector kernel for calls of <= dense_kernel_max_rows rows
    # with fp16/bf16 weights on the CPU when the extension builds, else F.linear;
    # sparse_cpu: the kernel for fp32 weights too; powerbench.engine.linear)
    dense_kernel: str = "auto"
    dense_kernel_max_rows: int = 8
    # `_target_` + parameters of the FFN class; any keys (each FFN validates its own)
    ffn: dict[str, Any] = field(default_factory=_dense_ffn)


@dataclass
class HFGenerateConfig(EngineConfig):
    _target_: str = "powerbench.engine.hf_generate.HFGenerateEngine"
    name: str = "hf_generate"


SCHEMAS = {"decoder": DecoderEngineConfig, "hf_generate": HFGenerateConfig}
