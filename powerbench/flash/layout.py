"""The FFN weight file: written once per model, read cluster by cluster from flash.

File = header block | layer 0 | layer 1 | ... | biases. Everything the reader touches is
4096-byte aligned (offsets and lengths), so `O_DIRECT` reads need no bounce buffer.

Bundled layout (PowerInfer-2's): a neuron's weights are one *bundle*, its fc1 (or
gate and up) row followed by its fc2 (down) column, all `d_model` long; the bundles of
`cluster_neurons` consecutive neurons form a *cluster*, zero-padded to a multiple of 4096
bytes. Reading one cluster is one contiguous read that brings every matrix's part.

Unbundled layout (the ablation): per layer, each matrix stored on its own
(`[d_ffn, d_model]`, the down projection transposed), its rows grouped into the same
clusters, each padded to 4096 bytes: one cluster costs one read per matrix (2 or 3).

Header: the fixed prefix `MAGIC | u32 version | u32 header_bytes | u32 json_bytes |
u32 json_crc32` then a JSON document: the geometry (kind, shapes, dtype, cluster size,
bundled), per-layer offsets and CRC32s of the layer payloads, the biases' offset and CRC,
the file size, and the fingerprint of the weights it was written from (a CRC32 of their
bytes, or of the recipe for synthetic ones). Writing, checking and reading the file:
`powerbench.flash.layout_io`.
"""

from __future__ import annotations

import json
import logging
import struct
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import cached_property
from typing import Literal

import numpy as np
import torch
from torch import Tensor

log = logging.getLogger(__name__)

MAGIC = b"PBFLASH\x00"
VERSION = 1
ALIGN = 4096
_PREFIX = struct.Struct("<8sIIII")  # magic, version, header_bytes, json_bytes, json_crc

FFN_KINDS = ("relu", "reglu", "drelu", "swiglu")
_DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "float16": torch.float16,
                                   "bfloat16": torch.bfloat16}
Verify = Literal["header", "full"]


class LayoutError(RuntimeError):
    """The weight file cannot be used as it is (the message says why)."""


def align_up(n: int, align: int = ALIGN) -> int:
    return -(-n // align) * align


def dtype_name(dtype: torch.dtype) -> str:
    for name, d in _DTYPES.items():
        if d == dtype:
            return name
    raise ValueError(f"flash layout supports {sorted(_DTYPES)}, got {dtype}")


@dataclass(frozen=True)
class LayoutGeometry:
    """Shapes and packing of one model's FFN weight file."""

    kind: str  # relu | reglu | drelu | swiglu
    n_layers: int
    d_model: int
    d_ffn: int
    dtype: str  # float32 | float16 | bfloat16
    bundled: bool
    cluster_neurons: int
    has_bias: bool = False  # relu only: b1 [d_ffn], b2 [d_model]

    def __post_init__(self) -> None:
        if self.kind not in FFN_KINDS:
            raise ValueError(f"unknown FFN kind {self.kind!r}; valid: {', '.join(FFN_KINDS)}")
        if self.dtype not in _DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}; valid: {', '.join(_DTYPES)}")
        for name in ("n_layers", "d_model", "d_ffn", "cluster_neurons"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.has_bias and self.kind != "relu":
            raise ValueError("only relu (OPT) FFNs carry biases in the flash layout")

    # ---- sizes ----------------------------------------------------------------------------
    @property
    def torch_dtype(self) -> torch.dtype:
        return _DTYPES[self.dtype]

    @cached_property
    def itemsize(self) -> int:
        return torch.empty((), dtype=self.torch_dtype).element_size()

    @cached_property
    def n_parts(self) -> int:
        """Matrices per neuron: fc1 + fc2 (relu) or gate + up + down."""
        return 2 if self.kind == "relu" else 3

    @property
    def part_names(self) -> tuple[str, ...]:
        return ("w1", "w2_t") if self.kind == "relu" else ("w_gate", "w_up", "w_down_t")

    @cached_property
    def row_bytes(self) -> int:
        return self.d_model * self.itemsize

    @cached_property
    def bundle_bytes(self) -> int:
        """One neuron's weights (all parts), unpadded."""
        return self.n_parts * self.row_bytes

    @cached_property
    def n_clusters(self) -> int:
        return -(-self.d_ffn // self.cluster_neurons)

    @cached_property
    def part_stride(self) -> int:
        """Unbundled: one cluster's rows of one matrix, padded."""
        return align_up(self.cluster_neurons * self.row_bytes)

    @cached_property
    def cluster_bytes(self) -> int:
        """Bytes read from the file for one cluster (padding included)."""
        if self.bundled:
            return align_up(self.cluster_neurons * self.bundle_bytes)
        return self.n_parts * self.part_stride

    @cached_property
    def layer_bytes(self) -> int:
        return self.n_clusters * self.cluster_bytes

    @property
    def neuron_bytes_total(self) -> int:
        """Unpadded FFN weight bytes of the whole model (what a DRAM budget is a share of)."""
        return self.n_layers * self.d_ffn * self.bundle_bytes

    @property
    def bias_bytes(self) -> int:
        return self.n_layers * (self.d_ffn + self.d_model) * 4 if self.has_bias else 0

    @property
    def header_bytes(self) -> int:
        """The header block: its size depends on its own numbers only through their
        digits, so room for the widest values is reserved."""
        return align_up(_PREFIX.size + 600 + 40 * self.n_layers + 64 * 2)

    @property
    def file_bytes(self) -> int:
        """The whole file: header, layers, biases."""
        return align_up(self.header_bytes + self.n_layers * self.layer_bytes + self.bias_bytes)

    # ---- where a cluster lives ------------------------------------------------------------
    def cluster_extents(self, layer_offset: int, clusters: np.ndarray,
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """File extents of `clusters` (ascending ids) for a staging buffer holding cluster
        i of the list at `[i * cluster_bytes, (i + 1) * cluster_bytes)`.

        Returns (file_offsets, lengths, dest_offsets), int64 arrays sorted by file offset.
        Bundled: one extent per cluster; unbundled: one per cluster and matrix, the stage
        slot then holds the matrices one after another (each `part_stride` long).
        """
        c = np.asarray(clusters, dtype=np.int64)
        pos = np.arange(c.size, dtype=np.int64) * self.cluster_bytes
        if self.bundled:
            return (layer_offset + c * self.cluster_bytes,
                    np.full(c.size, self.cluster_bytes, dtype=np.int64), pos)
        region = self.n_clusters * self.part_stride
        parts = np.arange(self.n_parts, dtype=np.int64)[:, None]
        offsets = layer_offset + parts * region + c[None, :] * self.part_stride
        dest = pos[None, :] + parts * self.part_stride
        lengths = np.full(offsets.size, self.part_stride, dtype=np.int64)
        return offsets.ravel(), lengths, dest.ravel()  # part-major: ascending file offsets


    def row_extents(self, layer_offset: int, clusters: np.ndarray, slots: np.ndarray,
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Zero-copy reads: every row of `clusters` straight into its arena row. Part p of
        neuron k of the cluster given slot s lands in buffer p at byte (s * cn + k) *
        row_bytes. Returns (file_offsets, lengths, buffers, dest_offsets); with O_DIRECT
        this needs `row_bytes` to be a multiple of the block size."""
        cn, rb, n_p = self.cluster_neurons, self.row_bytes, self.n_parts
        c = np.asarray(clusters, dtype=np.int64)[:, None, None]
        s = np.asarray(slots, dtype=np.int64)[:, None, None]
        k = np.arange(cn, dtype=np.int64)[None, :, None]
        p = np.arange(n_p, dtype=np.int64)[None, None, :]
        if self.bundled:
            offs = layer_offset + c * self.cluster_bytes + (k * n_p + p) * rb
        else:
            offs = layer_offset + p * (self.n_clusters * self.part_stride) \
                + c * self.part_stride + k * rb
        dest = (s * cn + k) * rb + 0 * p
        bufs = p + 0 * (c + k)
        return (offs.ravel(), np.full(offs.size, rb, dtype=np.int64), bufs.ravel(),
                dest.ravel())


@dataclass(frozen=True)
class LayoutHeader:
    geometry: LayoutGeometry
    header_bytes: int
    layer_offsets: tuple[int, ...]
    layer_crcs: tuple[int, ...]
    bias_offset: int
    bias_crc: int
    file_bytes: int
    fingerprint: str  # of the weights the file was written from

    def to_json(self) -> bytes:
        d = asdict(self)
        return json.dumps(d, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> LayoutHeader:
        d = json.loads(raw)
        d["geometry"] = LayoutGeometry(**d["geometry"])
        d["layer_offsets"] = tuple(d["layer_offsets"])
        d["layer_crcs"] = tuple(d["layer_crcs"])
        return cls(**d)


# ---- the weights' side ----------------------------------------------------------------------
@dataclass(frozen=True)
class LayerFFN:
    """One layer's FFN in the file's terms: neuron-major parts (each [d_ffn, d_model], the
    down projection transposed) and, for relu, fp32 biases."""

    parts: tuple[Tensor, ...]
    b1: Tensor | None = None
    b2: Tensor | None = None


def layer_ffn(f: object) -> LayerFFN:
    """One layer's FFN weights (`ReluFFNWeights` / `GatedFFNWeights`) -> `LayerFFN`."""
    if hasattr(f, "w1"):
        b1 = None if f.b1 is None else f.b1.float()  # type: ignore[attr-defined]
        b2 = None if f.b2 is None else f.b2.float()  # type: ignore[attr-defined]
        if (b1 is None) != (b2 is None):  # one missing bias is stored as zeros
            b1 = torch.zeros(f.w1.shape[0]) if b1 is None else b1  # type: ignore[attr-defined]
            b2 = torch.zeros(f.w1.shape[1]) if b2 is None else b2  # type: ignore[attr-defined]
        return LayerFFN((f.w1, f.w2_t), b1, b2)  # type: ignore[attr-defined]
    if any(getattr(f, b, None) is not None for b in ("b_gate", "b_up", "b_down")):
        raise ValueError("flash gated FFNs have no biases; this model has some")
    return LayerFFN((f.w_gate, f.w_up, f.w_down_t))  # type: ignore[attr-defined]


def layers_of(weights: object) -> list[LayerFFN]:
    """`DecoderWeights` (powerbench.engine.weights) -> per-layer `LayerFFN`s (no copies)."""
    return [layer_ffn(layer.ffn) for layer in weights.layers]  # type: ignore[attr-defined]


def geometry_for(layers: Sequence[LayerFFN], kind: str, bundled: bool,
                 cluster_neurons: int | None = None) -> LayoutGeometry:
    """The geometry of `layers`; `cluster_neurons` None: the fewest neurons whose bundles
    fill one 4096-byte block (1 for any d_model >= 1024 in fp16)."""
    w = layers[0].parts[0]
    d_ffn, d_model = w.shape
    itemsize = w.element_size()
    bundle = (2 if kind == "relu" else 3) * d_model * itemsize
    cn = cluster_neurons or max(1, ALIGN // bundle)
    return LayoutGeometry(kind=kind, n_layers=len(layers), d_model=d_model, d_ffn=d_ffn,
                          dtype=dtype_name(w.dtype), bundled=bundled, cluster_neurons=cn,
                          has_bias=layers[0].b1 is not None)


def _bytes(t: Tensor) -> memoryview:
    return memoryview(t.detach().cpu().contiguous().view(torch.uint8).numpy())


def weights_fingerprint(layers: Sequence[LayerFFN], kind: str) -> str:
    """CRC32 over every FFN weight and bias byte, with the shapes and dtype: a file written
    from other weights (same shapes) is stale."""
    w = layers[0].parts[0]
    crc = zlib.crc32(f"{kind}|{len(layers)}|{tuple(w.shape)}|{w.dtype}".encode())
    for layer in layers:
        for t in (*layer.parts, layer.b1, layer.b2):
            if t is not None:
                crc = zlib.crc32(_bytes(t), crc)
    return f"{crc:08x}"
