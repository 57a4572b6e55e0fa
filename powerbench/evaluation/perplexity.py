"""Perplexity on held-out text: exp(mean next-token negative log-likelihood)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from powerbench.progress import Progress

LogitsFn = Callable[[torch.Tensor], torch.Tensor]  # [batch, seq] ids -> [batch, seq, vocab]


@dataclass(frozen=True)
class PerplexityResult:
    perplexity: float
    nll: float  # mean negative log-likelihood (nats/token)
    tokens: int  # predicted tokens scored


def token_windows(tokenizer, texts: Sequence[str], seq_len: int, max_tokens: int) -> torch.Tensor:
    """Documents joined by EOS, cut into non-overlapping [n, seq_len] windows."""
    eos = tokenizer.eos_token_id
    ids: list[int] = []
    for text in texts:
        ids.extend(tokenizer(text, add_special_tokens=False)["input_ids"])
        if eos is not None:
            ids.append(eos)
        if len(ids) >= max_tokens:
            break
    n = min(len(ids), max_tokens) // seq_len
    if n == 0:
        raise ValueError(f"held-out text has {len(ids)} tokens, fewer than seq_len={seq_len}")
    return torch.tensor(ids[: n * seq_len], dtype=torch.long).view(n, seq_len)


@torch.inference_mode()
def perplexity(logits_fn: LogitsFn, windows: torch.Tensor, batch_size: int = 8) -> PerplexityResult:
    total_nll, total_tokens = 0.0, 0
    for start in Progress.iter(range(0, windows.shape[0], batch_size), "perplexity batches"):
        batch = windows[start:start + batch_size]
        logits = logits_fn(batch).float()
        nll = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                              batch[:, 1:].reshape(-1), reduction="sum")
        total_nll += float(nll)
        total_tokens += batch[:, 1:].numel()
    mean = total_nll / total_tokens
    return PerplexityResult(perplexity=math.exp(mean), nll=mean, tokens=total_tokens)


def hf_logits_fn(model) -> LogitsFn:
    """Dense logits from a transformers causal LM."""
    return lambda ids: model(input_ids=ids).logits
