"""Accuracy of dense and sparse inference: perplexity and multiple-choice accuracy."""

from powerbench.evaluation.accuracy import AccuracyReport, evaluate_accuracy, run_accuracy_eval
from powerbench.evaluation.masked import MaskCounts, ffn_masking, masked_logits_fn
from powerbench.evaluation.mc_tasks import (
    HF_TASKS,
    MCTaskUnavailableError,
    continuation_task,
    load_hf_task,
    load_mc_task,
)
from powerbench.evaluation.multiple_choice import (
    LengthNorm,
    MCChoice,
    MCItem,
    MCResult,
    score_items,
)
from powerbench.evaluation.perplexity import (
    PerplexityResult,
    hf_logits_fn,
    perplexity,
    token_windows,
)
from powerbench.evaluation.ppl_callback import MaskedPerplexity, calibration_perplexity

__all__ = [
    "HF_TASKS",
    "AccuracyReport",
    "LengthNorm",
    "MCChoice",
    "MCItem",
    "MCResult",
    "MCTaskUnavailableError",
    "MaskCounts",
    "MaskedPerplexity",
    "PerplexityResult",
    "calibration_perplexity",
    "continuation_task",
    "evaluate_accuracy",
    "ffn_masking",
    "hf_logits_fn",
    "load_hf_task",
    "load_mc_task",
    "masked_logits_fn",
    "perplexity",
    "run_accuracy_eval",
    "score_items",
    "token_windows",
]
