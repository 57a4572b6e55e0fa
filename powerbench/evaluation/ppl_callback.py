"""The perplexity callback adaptive sizing calls: `evaluate(predictors | None) -> float`."""

from __future__ import annotations

import hashlib

import torch
from torch import nn

from powerbench.evaluation.masked import masked_logits_fn
from powerbench.evaluation.perplexity import perplexity, token_windows
from powerbench.predictor.predictor_set import ActivePredictor


class MaskedPerplexity:
    """Perplexity on fixed token windows with FFNs masked by the predictors (None: dense).

    Use windows that are not the final evaluation's (e.g. a calibration slice) so the
    sizing loop does not tune on the test text. `cache_key` identifies model-independent
    inputs (the windows) for the predictor cache; dense perplexity is computed once.
    """

    def __init__(self, model: nn.Module, windows: torch.Tensor, batch_size: int = 8) -> None:
        self.model, self.windows, self.batch_size = model, windows, batch_size
        digest = hashlib.sha256(windows.to(torch.int64).contiguous().numpy().tobytes())
        self.cache_key = f"ppl:{tuple(windows.shape)}:{digest.hexdigest()[:16]}"
        self._dense: float | None = None

    def __call__(self, predictors: ActivePredictor | None) -> float:
        if predictors is None and self._dense is not None:
            return self._dense
        value = perplexity(masked_logits_fn(self.model, predictors), self.windows,
                           self.batch_size).perplexity
        if predictors is None:
            self._dense = value
        return value


def calibration_perplexity(model: nn.Module, tokenizer, texts: list[str], seq_len: int = 128,
                           max_tokens: int = 4096, batch_size: int = 8) -> MaskedPerplexity:
    """A MaskedPerplexity on the LAST documents of `texts` (e.g. the train split, whose
    first documents the profiler read), so sizing never sees the evaluation text."""
    windows = token_windows(tokenizer, list(reversed(texts)), seq_len, max_tokens)
    return MaskedPerplexity(model, windows, batch_size)
