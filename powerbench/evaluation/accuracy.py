"""Accuracy of sparse inference next to dense: perplexity and multiple choice.

Sparse = the model with FFN neurons outside the predicted set zeroed (see
`powerbench.evaluation.masked`); with predictors None both columns are dense.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from powerbench.evaluation.masked import MaskedLogits
from powerbench.evaluation.multiple_choice import LengthNorm, MCItem, score_items
from powerbench.evaluation.perplexity import perplexity
from powerbench.predictor.predictor_set import ActivePredictor


@dataclass(frozen=True)
class AccuracyReport:
    perplexity: float
    perplexity_dense: float
    mc_accuracy: float | None
    mc_accuracy_dense: float | None
    eval_tokens: int
    mc_items: int
    # predicted & active / active etc. over the evaluated text (sparse pass; None: dense)
    eval_recall: float | None
    eval_predicted_active_fraction: float | None
    eval_true_active_fraction: float | None

    @property
    def perplexity_delta_pct(self) -> float:
        return 100.0 * (self.perplexity - self.perplexity_dense) / self.perplexity_dense

    def metrics(self) -> dict[str, float]:
        out = {
            "perplexity": self.perplexity, "perplexity_dense": self.perplexity_dense,
            "perplexity_delta_pct": self.perplexity_delta_pct, "eval_tokens": self.eval_tokens,
        }
        if self.eval_recall is not None:
            out |= {"eval_predictor_recall": self.eval_recall,
                    "eval_predicted_active_fraction": self.eval_predicted_active_fraction,
                    "eval_true_active_fraction": self.eval_true_active_fraction}
        if self.mc_accuracy is not None:
            out |= {"mc_accuracy": self.mc_accuracy, "mc_accuracy_dense": self.mc_accuracy_dense,
                    "mc_items": self.mc_items}
        return out


def evaluate_accuracy(model, predictors: ActivePredictor | None, windows: torch.Tensor,
                      mc_items: Sequence[MCItem] = (),
                      length_norm: LengthNorm | str = LengthNorm.none,
                      batch_size: int = 8, max_len: int | None = None) -> AccuracyReport:
    """Dense and sparse perplexity on `windows` and accuracy on `mc_items`."""
    dense_fn = MaskedLogits(model, None)
    ppl_dense = perplexity(dense_fn, windows, batch_size)
    sparse_fn = MaskedLogits(model, predictors)
    ppl = perplexity(sparse_fn, windows, batch_size) if predictors is not None else ppl_dense
    counts = sparse_fn.counts
    mc = mc_dense = None
    if mc_items:
        mc_dense = score_items(dense_fn, mc_items, length_norm, batch_size, max_len).accuracy
        mc = (score_items(sparse_fn, mc_items, length_norm, batch_size, max_len).accuracy
              if predictors is not None else mc_dense)
    sparse = predictors is not None
    return AccuracyReport(
        perplexity=ppl.perplexity, perplexity_dense=ppl_dense.perplexity,
        mc_accuracy=mc, mc_accuracy_dense=mc_dense, eval_tokens=ppl.tokens,
        mc_items=len(mc_items),
        eval_recall=counts.recall if sparse else None,
        eval_predicted_active_fraction=counts.predicted_active_fraction if sparse else None,
        eval_true_active_fraction=counts.true_active_fraction if sparse else None,
    )


def run_accuracy_eval(model, tokenizer, predictors: ActivePredictor | None,
                      heldout_texts: Sequence[str], seq_len: int = 128, max_tokens: int = 16384,
                      mc_task: str | None = "continuation", mc_items: int = 200,
                      mc_length_norm: LengthNorm | str = LengthNorm.none, seed: int = 0,
                      batch_size: int = 8, **mc_options) -> AccuracyReport:
    """The evaluation stage: held-out perplexity windows + the multiple-choice task
    (`continuation` offline; piqa / winogrande / arc_easy online; None: skip MC)."""
    from powerbench.evaluation.mc_tasks import load_mc_task
    from powerbench.evaluation.perplexity import token_windows

    windows = token_windows(tokenizer, heldout_texts, seq_len, max_tokens)
    items = (load_mc_task(mc_task, tokenizer, heldout_texts, n_items=mc_items, seed=seed,
                          **mc_options) if mc_task else [])
    return evaluate_accuracy(model, predictors, windows, items, mc_length_norm, batch_size,
                             max_len=seq_len)
