"""Next-token selection: greedy, or temperature / top-k / top-p sampling with a seed."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class SamplingConfig:
    """`greedy=True` ignores the sampling knobs. top_k=0 and top_p=1.0 disable those filters.

    `suppress_ids` are never chosen (the engines pass the EOS ids so every row runs the
    full `new_tokens`, like `generate(min_new_tokens=N)`).
    """

    greedy: bool = True
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    suppress_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not self.greedy and self.temperature <= 0:
            raise ValueError("temperature must be > 0 when sampling (use greedy=True)")
        if self.top_k < 0 or not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"bad top_k={self.top_k} / top_p={self.top_p}")


def filter_top_k(logits: Tensor, k: int) -> Tensor:
    """Keep the k largest logits per row (others -> -inf); k <= 0 keeps all."""
    if k <= 0 or k >= logits.shape[-1]:
        return logits
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def filter_top_p(logits: Tensor, p: float) -> Tensor:
    """Keep the smallest set of tokens whose probability reaches p (always >= 1 token)."""
    if p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    probs = sorted_logits.softmax(-1)
    drop_sorted = (probs.cumsum(-1) - probs) >= p  # mass before this token already >= p
    drop = drop_sorted.scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


class Sampler:
    """Stateful per generation: owns the seeded generator, so a rerun repeats its draws."""

    def __init__(self, cfg: SamplingConfig, device: torch.device) -> None:
        self.cfg = cfg
        self.generator: torch.Generator | None = None
        if not cfg.greedy:
            self.generator = torch.Generator(device=device)
            self.generator.manual_seed(cfg.seed)
        self._suppress = (torch.tensor(cfg.suppress_ids, dtype=torch.long, device=device)
                          if cfg.suppress_ids else None)

    def __call__(self, logits: Tensor) -> Tensor:
        """logits [B, V] -> token ids [B]."""
        if self._suppress is not None:
            logits = logits.index_fill(-1, self._suppress, float("-inf"))
        if self.cfg.greedy:
            return logits.argmax(-1)
        logits = filter_top_p(filter_top_k(logits.float() / self.cfg.temperature,
                                           self.cfg.top_k), self.cfg.top_p)
        probs = logits.softmax(-1)
        return torch.multinomial(probs, 1, generator=self.generator).squeeze(-1)
