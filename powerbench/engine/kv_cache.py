"""A preallocated key/value cache: one [B, n_kv_heads, max_len, head_dim] pair per layer."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class KVCache:
    """Keys/values for `length` tokens of every row (all rows advance together).

    `next_pos[b]` is the position id the next token of row b gets (it differs from
    `length` only for left-padded rows). `key_valid` [B, max_len] marks real keys; it
    stays None until a padded batch is seen, so unpadded runs skip masking entirely.
    """

    k: list[Tensor]
    v: list[Tensor]
    next_pos: Tensor  # [B] long
    length: int = 0
    key_valid: Tensor | None = None

    @classmethod
    def allocate(cls, n_layers: int, batch: int, n_kv_heads: int, max_len: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device) -> KVCache:
        shape = (batch, n_kv_heads, max_len, head_dim)
        return cls(
            k=[torch.empty(shape, dtype=dtype, device=device) for _ in range(n_layers)],
            v=[torch.empty(shape, dtype=dtype, device=device) for _ in range(n_layers)],
            next_pos=torch.zeros(batch, dtype=torch.long, device=device),
        )

    @property
    def batch(self) -> int:
        return self.k[0].shape[0]

    @property
    def max_len(self) -> int:
        return self.k[0].shape[2]

    def reset(self) -> None:
        self.length = 0
        self.next_pos.zero_()
        self.key_valid = None

    def positions(self, n_new: int, mask: Tensor | None) -> Tensor:
        """Position ids [B, n_new] for the next tokens; `mask` [B, n_new] marks real ones.

        Also records the new keys' validity and advances `next_pos` (not `length`: the
        decoder does that once every layer has written its keys).
        """
        if self.length + n_new > self.max_len:
            raise ValueError(f"KV cache full: {self.length} + {n_new} > {self.max_len}")
        device = self.next_pos.device
        if mask is None:
            pos = self.next_pos[:, None] + torch.arange(n_new, device=device)[None, :]
            if self.key_valid is not None:
                self.key_valid[:, self.length:self.length + n_new] = True
            self.next_pos += n_new
            return pos
        mask = mask.to(device=device, dtype=torch.bool)
        if self.key_valid is None and not bool(mask.all()):
            self.key_valid = torch.ones(self.batch, self.max_len, dtype=torch.bool, device=device)
        if self.key_valid is not None:
            self.key_valid[:, self.length:self.length + n_new] = mask
        offs = mask.long().cumsum(1) - 1
        pos = (self.next_pos[:, None] + offs).clamp_min(0)
        self.next_pos += mask.long().sum(1)
        return pos

    def write(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store k, v [B, n_kv, n_new, hd] after the cached tokens; return all keys/values."""
        end = self.length + k.shape[2]
        self.k[layer][:, :, self.length:end] = k
        self.v[layer][:, :, self.length:end] = v
        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]
