"""Weight-free description of a transformer: the shapes every stage needs.

A ModelSpec is enough for synthetic profiles, placement and the cost model; real
weights come from `powerbench.model.loading`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class FFNKind(StrEnum):
    """How the MLP block turns its input into neuron activations.

    Member names equal their values so configs can say `ffn_kind: relu`.
    """

    relu = "relu"  # OPT: fc1 -> ReLU -> fc2 (2 matrices)
    reglu = "reglu"  # LLaMA-ReGLU: ReLU(gate) * up -> down (3 matrices)
    drelu = "drelu"  # Bamboo / TurboSparse: ReLU(gate) * ReLU(up) -> down
    swiglu = "swiglu"  # dense baseline: SiLU(gate) * up -> down

    @property
    def n_matrices(self) -> int:
        return 2 if self is FFNKind.relu else 3

    @property
    def is_sparse(self) -> bool:
        """ReLU-family activations produce exact zeros."""
        return self is not FFNKind.swiglu


class WeightDType(StrEnum):
    fp32 = "fp32"
    fp16 = "fp16"
    bf16 = "bf16"
    int8 = "int8"
    int4 = "int4"


# Bytes per parameter *including* quantisation scales: int8/int4 follow llama.cpp's
# Q8_0 / Q4_0 layouts (32 weights + one fp16 scale per block): 34/32 and 18/32 bytes.
BYTES_PER_PARAM: dict[WeightDType, float] = {
    WeightDType.fp32: 4.0,
    WeightDType.fp16: 2.0,
    WeightDType.bf16: 2.0,
    WeightDType.int8: 34 / 32,
    WeightDType.int4: 18 / 32,
}


def bytes_per_param(dtype: WeightDType | str) -> float:
    return BYTES_PER_PARAM[WeightDType(dtype)]


@dataclass(frozen=True)
class SparsityStats:
    """Published MLP activation statistics (published in the papers' sparsity studies), inputs for synthetic profiles.

    `token_sparsity`: mean fraction of FFN neurons inactive per token.
    `block_skew` / `model_skew`: share of neurons covering 80% of all activations
    within one MLP block / across the whole model (None where not published).
    `cold_prefix_layers` / `cold_prefix_active`: the first N layers have at most this
    active fraction per token (OPT-30B: first 24 layers under 1%).
    """

    token_sparsity: float
    block_skew: float | None = None
    model_skew: float | None = None
    cold_prefix_layers: int = 0
    cold_prefix_active: float | None = None
    source: str = ""


@dataclass(frozen=True)
class ModelSpec:
    name: str
    n_layers: int
    d_model: int
    d_ffn: int
    n_heads: int
    n_kv_heads: int
    ffn_kind: FFNKind
    vocab_size: int = 50272
    max_positions: int = 2048
    n_experts: int = 1  # MoE: FFN neurons per layer = n_experts * d_ffn
    experts_per_token: int = 1
    parallel_attn: bool = False
    tied_embeddings: bool = True
    stats: SparsityStats | None = None
    hf_id: str | None = None
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ffn_kind", FFNKind(self.ffn_kind))
        for name in ("n_layers", "d_model", "d_ffn", "n_heads", "n_kv_heads"):
            if getattr(self, name) <= 0:
                raise ValueError(f"ModelSpec {self.name!r}: {name} must be positive")
        if self.d_model % self.n_heads:
            raise ValueError(f"ModelSpec {self.name!r}: d_model not divisible by n_heads")

    # ---- shapes -------------------------------------------------------------------
    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def neurons_per_layer(self) -> int:
        return self.n_experts * self.d_ffn

    @property
    def total_neurons(self) -> int:
        return self.n_layers * self.neurons_per_layer

    @property
    def params_per_neuron(self) -> int:
        """Weights one FFN neuron owns: a row of each input matrix + a column of down."""
        return self.ffn_kind.n_matrices * self.d_model

    @property
    def ffn_params_per_layer(self) -> int:
        return self.neurons_per_layer * self.params_per_neuron

    @property
    def attn_params_per_layer(self) -> int:
        kv = self.n_kv_heads * self.head_dim
        return self.d_model * self.d_model * 2 + self.d_model * kv * 2  # q, o + k, v

    @property
    def embedding_params(self) -> int:
        emb = self.vocab_size * self.d_model
        return emb if self.tied_embeddings else 2 * emb

    @property
    def total_params(self) -> int:
        per_layer = self.attn_params_per_layer + self.ffn_params_per_layer
        return self.n_layers * per_layer + self.embedding_params

    # ---- bytes ----------------------------------------------------------------------
    def neuron_bytes(self, dtype: WeightDType | str = WeightDType.fp16) -> float:
        return self.params_per_neuron * bytes_per_param(dtype)

    def ffn_bytes_per_layer(self, dtype: WeightDType | str = WeightDType.fp16) -> float:
        return self.ffn_params_per_layer * bytes_per_param(dtype)

    def attn_bytes_per_layer(self, dtype: WeightDType | str = WeightDType.fp16) -> float:
        return self.attn_params_per_layer * bytes_per_param(dtype)

    def total_bytes(self, dtype: WeightDType | str = WeightDType.fp16) -> float:
        return self.total_params * bytes_per_param(dtype)

    def kv_cache_bytes(self, context: int, batch: int = 1, bytes_per_value: float = 2.0) -> float:
        """K and V for every layer at `context` tokens (fp16 cache by default)."""
        kv_dim = self.n_kv_heads * self.head_dim
        return 2 * self.n_layers * kv_dim * context * batch * bytes_per_value
