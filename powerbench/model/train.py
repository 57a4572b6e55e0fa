"""Deterministic causal-LM training and held-out scoring on CPU (used by `tiny_relu`).

The token stream is cut into non-overlapping `seq_len` windows, visited in a seeded
permutation per epoch; AdamW with linear warm-up and cosine decay; fixed thread count
and `torch.use_deterministic_algorithms`, so the same inputs give the same weights.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F

from powerbench.model.config import TinyTrainConfig
from powerbench.progress import Progress

log = logging.getLogger(__name__)


@dataclass
class TrainReport:
    """How a tiny model was trained and how good it is (saved next to its weights)."""

    key: str
    train_time_s: float  # wall time of the whole build: tokenizer, data, optimisation, scoring
    tokenizer_time_s: float
    optimize_time_s: float
    steps: int
    tokens_seen: int
    train_stream_tokens: int  # size of the training token stream
    final_train_loss: float  # mean of the last steps (nats/token)
    heldout_tokens: int  # scored held-out tokens
    heldout_perplexity: float
    unigram_perplexity: float  # add-one unigram fit on the train stream, same held-out tokens
    heldout_bits_per_byte: float
    n_params: int
    train_docs: int
    heldout_docs: int
    threads: int
    load_average: float = math.nan  # 1-minute, after training (powerbench.load_window)
    versions: dict[str, str] = field(default_factory=dict)

    def metrics(self) -> dict[str, float]:
        """The pipeline's metric names (README metrics table)."""
        return {
            "tiny_train_time_s": self.train_time_s,
            "tiny_heldout_perplexity": self.heldout_perplexity,
            "tiny_unigram_perplexity": self.unigram_perplexity,
        }

    def to_dict(self) -> dict:
        return asdict(self)


@contextmanager
def deterministic_cpu(threads: int, seed: int) -> Iterator[None]:
    """Fixed thread count, deterministic kernels and seeds; the previous state is restored."""
    saved_threads = torch.get_num_threads()
    saved_det = torch.are_deterministic_algorithms_enabled()
    saved_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.set_num_threads(max(threads, 1))
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.manual_seed(seed)
    try:
        yield
    finally:
        torch.set_num_threads(saved_threads)
        torch.use_deterministic_algorithms(saved_det, warn_only=saved_warn)


def lr_at(step: int, cfg: TinyTrainConfig) -> float:
    """Linear warm-up to `lr`, then cosine decay to `lr * min_lr_ratio` at the last step."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    span = max(cfg.steps - cfg.warmup_steps, 1)
    progress = min((step - cfg.warmup_steps) / span, 1.0)
    floor = cfg.lr * cfg.min_lr_ratio
    return floor + 0.5 * (cfg.lr - floor) * (1.0 + math.cos(math.pi * progress))


def _param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    other = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": other, "weight_decay": 0.0}]


def windows(stream: torch.Tensor, seq_len: int, max_tokens: int | None = None) -> torch.Tensor:
    """[n, seq_len] non-overlapping windows from the start of a 1-D token stream."""
    usable = stream.numel() if max_tokens is None else min(stream.numel(), max_tokens)
    n = usable // seq_len
    if n == 0:
        raise ValueError(f"token stream has {stream.numel()} tokens, fewer than {seq_len}")
    return stream[: n * seq_len].view(n, seq_len)


def _batches(chunks: torch.Tensor, batch_size: int, seed: int) -> Iterator[torch.Tensor]:
    """Endless batches of whole windows, a fresh seeded permutation per epoch."""
    gen = torch.Generator().manual_seed(seed)
    epoch = 0
    while True:
        order = torch.randperm(chunks.shape[0], generator=gen)
        if epoch == 1:
            log.info("training data exhausted after one epoch; repeating it")
        for start in range(0, order.numel() - batch_size + 1, batch_size):
            yield chunks[order[start:start + batch_size]]
        epoch += 1


@dataclass
class OptimizeResult:
    final_loss: float
    tokens_seen: int
    time_s: float


def _silent(line: str) -> None:
    """A Progress sink that drops its reports (progress=False)."""


def optimize(model: torch.nn.Module, stream: torch.Tensor, cfg: TinyTrainConfig,
             progress: bool = True) -> OptimizeResult:
    """Train `model` (a transformers causal LM) in place on `stream` for `cfg.steps` steps."""
    chunks = windows(stream, cfg.seq_len)
    if chunks.shape[0] < cfg.batch_size:
        raise ValueError(f"{chunks.shape[0]} training windows < batch_size {cfg.batch_size}")
    opt = torch.optim.AdamW(_param_groups(model, cfg.weight_decay), lr=cfg.lr,
                            betas=(0.9, cfg.beta2), eps=1e-8)
    model.train()
    batches = _batches(chunks, cfg.batch_size, cfg.seed)
    losses: list[float] = []
    start = time.perf_counter()
    bar = Progress("training tiny_relu", cfg.steps, emit=None if progress else _silent)
    for step in range(cfg.steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        batch = next(batches)
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        losses.append(loss.item())
        rate = (step + 1) * batch.numel() / (time.perf_counter() - start)
        bar.label = f"training tiny_relu (loss {losses[-1]:.3f}, {rate:.0f} tok/s)"
        bar.step()
    bar.done()
    model.eval()
    tail = losses[-max(len(losses) // 10, 1):]
    return OptimizeResult(final_loss=sum(tail) / len(tail),
                          tokens_seen=cfg.steps * cfg.batch_size * cfg.seq_len,
                          time_s=time.perf_counter() - start)


@torch.inference_mode()
def model_nll(model: torch.nn.Module, wins: torch.Tensor, batch_size: int = 16) -> float:
    """Summed next-token NLL (nats) of wins[:, 1:] given the preceding tokens."""
    total = 0.0
    for start in range(0, wins.shape[0], batch_size):
        batch = wins[start:start + batch_size]
        logits = model(input_ids=batch).logits.float()
        total += float(F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                       batch[:, 1:].reshape(-1), reduction="sum"))
    return total


def unigram_nll(train_stream: torch.Tensor, targets: torch.Tensor, vocab_size: int) -> float:
    """Summed NLL (nats) of `targets` under an add-one-smoothed unigram fit on the train stream."""
    counts = torch.bincount(train_stream, minlength=vocab_size).double() + 1.0
    log_p = counts.log() - counts.sum().log()
    return float(-log_p[targets.reshape(-1)].sum())


def scored_bytes(targets: torch.Tensor, byte_lengths: Sequence[int]) -> int:
    lengths = torch.tensor(byte_lengths, dtype=torch.long)
    return int(lengths[targets.reshape(-1)].sum())

