"""Typed schemas for the `predictor` config group (registered in Hydra's ConfigStore).

Each yaml in conf/predictor picks one schema and names its sizing strategy in
`_target_` (a class taking the config node; see `powerbench.predictor.strategies`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from powerbench.model.spec import WeightDType
from powerbench.schema_helpers import check_range, coerce_enums


class PredictorArch(StrEnum):
    mlp = "mlp"  # PowerInfer: fc1 -> ReLU -> fc2
    lowrank = "lowrank"  # Deja Vu: a low-rank linear pair (no nonlinearity)


class LossKind(StrEnum):
    bce = "bce"  # binary cross-entropy, positives weighted by pos_weight
    focal = "focal"  # the same, times (1 - p_t)^gamma (down-weights easy negatives)


@dataclass
class TrainConfig:
    """How one layer's predictor is trained on the profile's (hidden, mask) samples.

    Samples are split once (seeded, shared by all layers) into train / validation / test:
    validation drives early stopping and the decision threshold, test gives the reported
    recall / precision / predicted-active fraction.
    """

    arch: PredictorArch = PredictorArch.mlp
    loss: LossKind = LossKind.bce
    pos_weight: float | None = None  # None: negatives / positives of the train split
    max_pos_weight: float = 20.0
    focal_gamma: float = 2.0
    lr: float = 1e-2
    weight_decay: float = 0.0
    batch_size: int = 256
    max_epochs: int = 100
    patience: int = 8  # epochs without validation-loss improvement before stopping
    min_delta: float = 1e-3  # relative improvement that counts
    val_fraction: float = 0.15
    test_fraction: float = 0.15
    seed: int = 0
    threads: int = 1  # torch threads while training (small matmuls: more threads only contend)

    def __post_init__(self) -> None:
        coerce_enums(self)


@dataclass
class FixedConfig:
    """One hidden width `rank` for every layer."""

    _target_: str = "powerbench.predictor.strategies.FixedSizing"
    name: str = "fixed"
    rank: int = 64
    target_recall: float = 0.95  # micro recall (active neurons found / active neurons)
    # thresholds are tuned on validation for target + margin + recall_z standard errors,
    # and never set above max_threshold (a logit; 0 = the classifier's own decision
    # boundary), so a predictor that beats the target keeps its extra recall
    recall_margin: float = 0.0
    recall_z: float = 2.0
    max_threshold: float | None = 0.0
    weight_dtype: WeightDType = WeightDType("fp16")  # storage dtype for predictor_param_bytes
    train: TrainConfig = field(default_factory=TrainConfig)

    def __post_init__(self) -> None:
        coerce_enums(self)
        check_range("predictor.target_recall", self.target_recall, 0.0, 1.0, low_open=True)
        if self.rank < 1:
            raise ValueError(f"predictor.rank must be >= 1, got {self.rank}")

    def ranks(self, n_layers: int) -> list[int]:
        """The hidden width of each of `n_layers` layers."""
        return [self.rank] * n_layers


@dataclass
class TailRanksConfig(FixedConfig):
    """`rank` for every layer but the last `tail_layers`, which get `tail_rank`: the
    low-rank predictors of LLM in a Flash (Alizadeh et al., arXiv 2312.11514, §4.2:
    Falcon 7B, rank 256 for the first 28 layers and 1152 for the last four)."""

    _target_: str = "powerbench.predictor.strategies.FixedSizing"
    name: str = "tail_ranks"
    tail_layers: int = 4
    tail_rank: int = 1152

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.tail_layers < 0 or self.tail_rank < 1:
            raise ValueError(f"predictor.tail_layers must be >= 0 and predictor.tail_rank "
                             f">= 1, got {self.tail_layers}, {self.tail_rank}")

    def ranks(self, n_layers: int) -> list[int]:
        tail = min(self.tail_layers, n_layers)
        return [self.rank] * (n_layers - tail) + [self.tail_rank] * tail


@dataclass
class AdaptiveConfig:
    """PowerInfer section 5.1: size each layer's predictor by its sparsity and skew.

    r0 = rank_per_active x (mean active neurons per token), scaled down for skewed
    layers by clip((skew / skew_reference) ** skew_power, min_skew_scale, 1), where
    skew = share of neurons covering 80% of activations (0.8 = flat). A layer meets
    the target when the threshold that reaches `target_recall` predicts at most
    `max_active_ratio` x its true active fraction; layers that miss grow by
    `grow_factor` (up to `max_rank`). Then layers shrink by the same factor, largest
    first, as long as they still meet the target: unconditionally while the predictors
    exceed `max_param_share` of the model's parameters, and (`minimise_cost`) while a
    shrink lowers the layer's weights read per token (predictor parameters + predicted
    neurons x parameters per neuron). Then, if a perplexity callback is given, while
    sparse perplexity exceeds dense by more than `ppl_tolerance_pct`, the target recall
    is tightened (1 - target shrinks by `recall_tighten`) and the layer loop reruns.
    """

    _target_: str = "powerbench.predictor.strategies.AdaptiveSizing"
    name: str = "adaptive"
    target_recall: float = 0.95
    recall_margin: float = 0.0
    recall_z: float = 2.0
    max_threshold: float | None = 0.0
    weight_dtype: WeightDType = WeightDType("fp16")
    rank_per_active: float = 0.5
    min_rank: int = 16
    max_rank: int = 512
    rank_multiple: int = 8
    skew_reference: float = 0.8
    skew_power: float = 1.0
    min_skew_scale: float = 0.25
    max_active_ratio: float = 2.0
    grow_factor: float = 1.5
    max_rounds: int = 4  # grow rounds per target
    ppl_tolerance_pct: float = 1.0
    recall_tighten: float = 0.5
    max_ppl_rounds: int = 4
    max_param_share: float = 0.10  # shrink towards it; warn and flag in info if still over
    minimise_cost: bool = True
    train: TrainConfig = field(default_factory=TrainConfig)

    def __post_init__(self) -> None:
        coerce_enums(self)
        check_range("predictor.target_recall", self.target_recall, 0.0, 1.0, low_open=True)


@dataclass
class OracleConfig:
    """The true mask, computed from the activation itself: accuracy and speed bound."""

    _target_: str = "powerbench.predictor.strategies.OracleSizing"
    name: str = "oracle"


@dataclass
class ThresholdConfig:
    """CATS threshold sparsity: per layer, neurons with |act(gate(x))| <= t_l are dropped,
    t_l the `target_sparsity` quantile on calibration FFN inputs: the profile's samples when
    it has them, else a forward pass over the last `calibration_tokens` tokens of the train
    text (what `prepare_predictors` passes as calibration texts), at most
    `samples_per_layer` rows per layer."""

    _target_: str = "powerbench.predictor.strategies.ThresholdSizing"
    name: str = "threshold"
    target_sparsity: float = 0.5
    samples_per_layer: int = 4096
    seed: int = 0


@dataclass
class NoneConfig:
    """No predictor: dense FFNs."""

    _target_: str = "powerbench.predictor.strategies.DenseSizing"
    name: str = "none"


SCHEMAS = {
    "fixed": FixedConfig,
    "tail_ranks": TailRanksConfig,
    "adaptive": AdaptiveConfig,
    "oracle": OracleConfig,
    "none": NoneConfig,
    "threshold": ThresholdConfig,
}
