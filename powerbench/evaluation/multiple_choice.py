"""Multiple-choice accuracy by log-likelihood.

Each choice is a (context, continuation) pair of token ids; its score is the
log-likelihood of the continuation tokens given the context (only the continuation is
scored, so choices may have different contexts, as in Winogrande's partial scoring).
The prediction is the highest-scoring choice (ties: the first).

Length normalisation (`LengthNorm`):
- `none`:   sum of the continuation's token log-probabilities (lm-eval-harness `acc`)
- `tokens`: that sum / number of continuation tokens (mean per token)
- `bytes`:  that sum / UTF-8 bytes of the continuation text (lm-eval-harness
            `acc_norm`); needs `MCChoice.n_bytes`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

import torch

from powerbench.evaluation.perplexity import LogitsFn
from powerbench.progress import Progress


class LengthNorm(StrEnum):
    none = "none"
    tokens = "tokens"
    bytes = "bytes"


@dataclass(frozen=True)
class MCChoice:
    context: tuple[int, ...]
    continuation: tuple[int, ...]
    n_bytes: int = 0  # UTF-8 bytes of the continuation text (0: unknown)


@dataclass(frozen=True)
class MCItem:
    choices: tuple[MCChoice, ...]
    label: int  # index of the correct choice

    def __post_init__(self) -> None:
        if not 0 <= self.label < len(self.choices):
            raise ValueError(f"label {self.label} out of range for {len(self.choices)} choices")


@dataclass(frozen=True)
class MCResult:
    accuracy: float
    n_items: int
    predictions: list[int]
    scores: list[list[float]]  # per item, per choice (after normalisation)


def _per_byte(ll: float, choice: MCChoice) -> float:
    if choice.n_bytes <= 0:
        raise ValueError("length_norm=bytes needs MCChoice.n_bytes (the continuation's text)")
    return ll / choice.n_bytes


_NORMS: dict[LengthNorm, Callable[[float, MCChoice], float]] = {
    LengthNorm.none: lambda ll, c: ll,
    LengthNorm.tokens: lambda ll, c: ll / len(c.continuation),
    LengthNorm.bytes: _per_byte,
}


def _sequence(choice: MCChoice, max_len: int | None) -> list[int]:
    if not choice.context:
        raise ValueError("a choice needs a non-empty context (the first token is not predicted)")
    if not choice.continuation:
        raise ValueError("a choice needs a non-empty continuation")
    ids = list(choice.context) + list(choice.continuation)
    if max_len is not None:
        if len(choice.continuation) >= max_len:
            raise ValueError(f"continuation of {len(choice.continuation)} tokens does not fit "
                             f"max_len={max_len} with context")
        ids = ids[-max_len:]  # drop the oldest context tokens
    return ids


@torch.inference_mode()
def continuation_loglik(logits_fn: LogitsFn, choices: Sequence[MCChoice], batch_size: int = 16,
                        max_len: int | None = None) -> list[float]:
    """Sum of log p(continuation token | everything before it), per choice."""
    seqs = [_sequence(c, max_len) for c in choices]
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))  # similar lengths together
    out = [0.0] * len(seqs)
    for start in Progress.iter(range(0, len(order), batch_size), "multiple-choice batches"):
        idx = order[start:start + batch_size]
        width = max(len(seqs[i]) for i in idx)
        # right padding: a causal model's logits before the padding are unaffected
        batch = torch.tensor([seqs[i] + [seqs[i][-1]] * (width - len(seqs[i])) for i in idx])
        logprobs = torch.log_softmax(logits_fn(batch).float(), dim=-1)
        for row, i in enumerate(idx):
            n, k = len(seqs[i]), len(choices[i].continuation)
            targets = batch[row, n - k:n]
            out[i] = float(logprobs[row, n - k - 1:n - 1].gather(-1, targets[:, None]).sum())
    return out


def score_items(logits_fn: LogitsFn, items: Sequence[MCItem],
                length_norm: LengthNorm | str = LengthNorm.none, batch_size: int = 16,
                max_len: int | None = None) -> MCResult:
    if not items:
        raise ValueError("no multiple-choice items to score")
    norm = _NORMS[LengthNorm(length_norm)]
    flat = [c for item in items for c in item.choices]
    ll = continuation_loglik(logits_fn, flat, batch_size, max_len)
    scores, predictions, pos = [], [], 0
    for item in items:
        row = [norm(ll[pos + j], c) for j, c in enumerate(item.choices)]
        pos += len(item.choices)
        scores.append(row)
        predictions.append(max(range(len(row)), key=lambda j, r=row: (r[j], -j)))
    correct = sum(p == item.label for p, item in zip(predictions, items, strict=True))
    return MCResult(accuracy=correct / len(items), n_items=len(items),
                    predictions=predictions, scores=scores)
