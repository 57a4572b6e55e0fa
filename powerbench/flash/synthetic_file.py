"""A synthetic model's FFN weight file, streamed layer by layer: the FFN never in DRAM.

`synthetic_flash_file(spec, dtype, seed, path)` writes the bundled flash file of `spec`'s
FFNs with the seeded random weights of `powerbench.engine.synthetic.synthetic_ffn`, one
layer drawn, written, checksummed and dropped at a time (resumable after an interruption,
`powerbench.flash.layout_io.write_layout`), and reuses a file that checks out. Its
fingerprint is the recipe's (kind, shape, dtype, seed), not a CRC of the bytes, so a
check needs no weights in memory: `FlashFFN(weights=None, path=...)` then runs it.

The same layers drawn in DRAM (`synthetic_decoder_weights(spec, dtype, seed,
ffn="per_layer")`) give the in-DRAM engine the same FFN, for checks on small shapes.
"""

from __future__ import annotations

import logging
import os
import warnings
import zlib
from collections.abc import Callable
from pathlib import Path

import torch

from powerbench.engine.synthetic import synthetic_ffn
from powerbench.flash.layout import (
    ALIGN,
    LayoutError,
    LayoutGeometry,
    LayoutHeader,
    dtype_name,
    layer_ffn,
)
from powerbench.flash.layout_io import open_layout, write_layout
from powerbench.model.spec import FFNKind, ModelSpec

log = logging.getLogger(__name__)


def synthetic_geometry(spec: ModelSpec, dtype: torch.dtype, bundled: bool = True,
                       cluster_neurons: int | None = None) -> LayoutGeometry:
    """The file geometry of `spec`'s FFNs (`cluster_neurons` None: the fewest neurons whose
    bundles fill a 4096-byte block, as `geometry_for`)."""
    kind = spec.ffn_kind.value if isinstance(spec.ffn_kind, FFNKind) else str(spec.ffn_kind)
    itemsize = torch.empty((), dtype=dtype).element_size()
    bundle = (2 if kind == "relu" else 3) * spec.d_model * itemsize
    return LayoutGeometry(kind=kind, n_layers=spec.n_layers, d_model=spec.d_model,
                          d_ffn=spec.d_ffn, dtype=dtype_name(dtype), bundled=bundled,
                          cluster_neurons=cluster_neurons or max(1, ALIGN // bundle),
                          has_bias=kind == "relu")


def synthetic_fingerprint(g: LayoutGeometry, seed: int) -> str:
    """The recipe's fingerprint: the same for every file drawn from it."""
    recipe = f"synthetic_ffn|{g.kind}|{g.n_layers}|{g.d_model}|{g.d_ffn}|{g.dtype}|{seed}"
    return f"syn{zlib.crc32(recipe.encode()):08x}"


def synthetic_flash_file(spec: ModelSpec, dtype: torch.dtype, seed: int, path: str | os.PathLike,
                         bundled: bool = True, cluster_neurons: int | None = None,
                         progress: Callable[[int, int], None] | None = None) -> LayoutHeader:
    """The flash file of `spec`'s synthetic FFNs at `path`: reused when it checks out
    (header, shapes, recipe), else written (or an interrupted write resumed)."""
    g = synthetic_geometry(spec, dtype, bundled, cluster_neurons)
    fingerprint = synthetic_fingerprint(g, seed)
    path = Path(path)
    if path.exists():
        try:
            return open_layout(path, g, fingerprint)
        except LayoutError as err:
            warnings.warn(f"flash weight file rebuilt: {err}", RuntimeWarning, stacklevel=2)

    def layer(i: int):
        return layer_ffn(synthetic_ffn(spec, i, dtype, seed, dense_copy=False))

    header = write_layout(path, layer, g, fingerprint, progress=progress)
    log.info("flash: wrote %s (%.1f GB)", path, header.file_bytes / 1e9)
    return header
