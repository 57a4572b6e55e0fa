"""Argument checks shared by every backend, with the same error types and messages.

Metadata checks (shapes, dtypes, devices) are cheap and always run. The data check of an
active list (range and uniqueness, :func:`validate_ids`) reads the indices; the compiled
CPU backend does it in C++ instead, and every backend skips it with ``check=False``.
"""

from __future__ import annotations

import torch

WEIGHT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
INDEX_DTYPES = (torch.int32, torch.int64)


def check_device(t: torch.Tensor, name: str, device: str) -> None:
    if t.device.type != device:
        raise ValueError(f"{name} is on {t.device}, this backend runs on {device}")


def check_weight(w: torch.Tensor, name: str, device: str) -> None:
    if not isinstance(w, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(w).__name__}")
    if w.dtype not in WEIGHT_DTYPES:
        raise TypeError(f"{name} must be float32, float16 or bfloat16, got {w.dtype}")
    if w.dim() != 2:
        raise ValueError(f"{name} must be 2-D [neurons, features], got shape {tuple(w.shape)}")
    check_device(w, name, device)


def check_same(ref: torch.Tensor, ref_name: str, other: torch.Tensor, name: str) -> None:
    if other.shape != ref.shape:
        raise ValueError(f"{name} has shape {tuple(other.shape)}, expected {tuple(ref.shape)} "
                         f"like {ref_name}")
    if other.dtype != ref.dtype:
        raise TypeError(f"{name} is {other.dtype} but {ref_name} is {ref.dtype}")


def check_vector(v: torch.Tensor | None, length: int, name: str, device: str) -> None:
    if v is None:
        return
    if not v.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {v.dtype}")
    if v.shape != (length,):
        raise ValueError(f"{name} must have shape ({length},), got {tuple(v.shape)}")
    check_device(v, name, device)


def as_batch(x: torch.Tensor, features: int, name: str, device: str) -> torch.Tensor:
    """x as [batch, features]; a 1-D x is one token."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor")
    check_device(x, name, device)
    x2 = x.unsqueeze(0) if x.dim() == 1 else x
    if x2.dim() != 2 or x2.shape[1] != features or x2.shape[0] < 1:
        raise ValueError(f"{name} must be [batch >= 1, {features}] or [{features}], "
                         f"got {tuple(x.shape)}")
    return x2


def check_out(out: torch.Tensor, like: torch.Tensor) -> None:
    """``out`` can take a result like ``like``: same dtype (else TypeError), shape and device
    (else ValueError)."""
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a torch.Tensor, got {type(out).__name__}")
    if out.dtype != like.dtype:
        raise TypeError(f"out is {out.dtype}, the result is {like.dtype}")
    if out.shape != like.shape:
        raise ValueError(f"out has shape {list(out.shape)}, the result is {list(like.shape)}")
    check_device(out, "out", like.device.type)


def check_index_type(idx: torch.Tensor, device: str) -> None:
    if not isinstance(idx, torch.Tensor):
        raise TypeError(f"idx must be a torch.Tensor of int32/int64, got {type(idx).__name__}")
    if idx.dtype not in INDEX_DTYPES:
        raise TypeError(f"idx must be int32 or int64, got {idx.dtype}")
    if idx.dim() != 1:
        raise ValueError(f"idx must be 1-D, got shape {tuple(idx.shape)}")
    check_device(idx, "idx", device)


def validate_ids(idx: torch.Tensor, limit: int) -> None:
    """Raise IndexError for ids outside [0, limit) and ValueError for repeated ids."""
    if idx.numel() == 0:
        return
    bad = ((idx < 0) | (idx >= limit)).nonzero()
    if bad.numel():
        pos = int(bad[0, 0])
        raise IndexError(f"idx[{pos}] = {int(idx[pos])} is out of range for {limit} neurons")
    counts = torch.bincount(idx.long(), minlength=limit)
    if int(counts.max()) > 1:
        neuron = int(counts.argmax())
        where = (idx == neuron).nonzero()[1, 0]
        raise ValueError(f"idx holds neuron {neuron} twice (again at position {int(where)}); "
                         "the active set must not repeat neurons")
