"""Writing, checking and reading back the FFN weight file (`powerbench.flash.layout`).

`write_layout` streams the file layer by layer from a `layer(i) -> LayerFFN` source (a
list of layers, or a generator of synthetic ones): only one layer is in memory at a
time. It writes to `<path>.partial` with a `<path>.partial.json` progress record (the
geometry, the fingerprint, each finished layer's CRC32) after every layer, so an
interrupted write resumes at the first unfinished layer; the header goes last and the file
is renamed into place (a crash leaves no half file under the final name).
`open_layout` checks a file (magic, version, header checksum, truncation, shapes, stale
weights; the payload CRCs with `verify="full"`) and raises `LayoutError` with the reason;
`ensure_layout` then rewrites it.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import logging
import os
import warnings
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from powerbench.flash.layout import (
    _PREFIX,
    MAGIC,
    VERSION,
    LayerFFN,
    LayoutError,
    LayoutGeometry,
    LayoutHeader,
    Verify,
)

log = logging.getLogger(__name__)


def _layer_block(g: LayoutGeometry, layer: LayerFFN) -> np.ndarray:
    """One layer's bytes in file order (uint8 [layer_bytes])."""
    cn, d = g.cluster_neurons, g.d_model
    padded = g.n_clusters * cn
    parts = []
    for p in layer.parts:
        p = p.detach().cpu().to(g.torch_dtype)
        if tuple(p.shape) != (g.d_ffn, d):
            raise ValueError(f"FFN part of shape {tuple(p.shape)}, expected {(g.d_ffn, d)}")
        if padded > g.d_ffn:
            p = torch.cat([p, p.new_zeros(padded - g.d_ffn, d)])
        parts.append(p.contiguous().view(torch.uint8).numpy().reshape(g.n_clusters, cn, -1))
    if g.bundled:
        body = np.stack(parts, axis=2).reshape(g.n_clusters, cn * g.bundle_bytes)
        out = np.zeros((g.n_clusters, g.cluster_bytes), dtype=np.uint8)
        out[:, : body.shape[1]] = body
        return out.ravel()
    out = np.zeros((g.n_parts, g.n_clusters, g.part_stride), dtype=np.uint8)
    for i, p in enumerate(parts):
        out[i, :, : cn * g.row_bytes] = p.reshape(g.n_clusters, -1)
    return out.ravel()


def _bias_vector(g: LayoutGeometry, layer: LayerFFN) -> np.ndarray:
    """One layer's biases as stored: fp32 b1 [d_ffn] then b2 [d_model] (bytes)."""
    assert layer.b1 is not None and layer.b2 is not None
    vec = np.concatenate([layer.b1.detach().cpu().float().numpy(),
                          layer.b2.detach().cpu().float().numpy()])
    return vec.astype(np.float32).view(np.uint8)


def _drop_page_cache(fd: int) -> None:
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


LayerSource = Callable[[int], LayerFFN]


def _progress(partial: Path) -> Path:
    return partial.with_name(partial.name + ".json")


def _resume_point(partial: Path, g: LayoutGeometry, fingerprint: str, file_bytes: int
                  ) -> list[int]:
    """The CRCs of the layers a previous, interrupted write finished (empty: start over)."""
    record = _progress(partial)
    try:
        doc = json.loads(record.read_text())
        if (LayoutGeometry(**doc["geometry"]) == g and doc["fingerprint"] == fingerprint
                and partial.stat().st_size == file_bytes):
            return [int(c) for c in doc["layer_crcs"]]
    except (OSError, ValueError, TypeError, KeyError):
        pass
    return []


def write_layout(path: str | os.PathLike, layers: Sequence[LayerFFN] | LayerSource,
                 geometry: LayoutGeometry, fingerprint: str, resume: bool = True,
                 progress: Callable[[int, int], None] | None = None) -> LayoutHeader:
    """Write the file layer by layer (see the module docstring). `layers`: a sequence of
    `LayerFFN`, or a function `i -> LayerFFN` called once per layer still to write (one
    layer in memory at a time). `resume` False: an earlier partial write is discarded.
    `progress(done, n_layers)` is called after each layer."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    source: LayerSource = layers.__getitem__ if isinstance(layers, Sequence) else layers
    if isinstance(layers, Sequence) and len(layers) != geometry.n_layers:
        raise ValueError(f"{len(layers)} layers, geometry says {geometry.n_layers}")
    # one writer per folder at a time: the partial file's name is fixed (for resuming)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        return _write(path, source, geometry, fingerprint, resume, progress)
    finally:
        os.close(folder)


def _write(path: Path, source: LayerSource, g: LayoutGeometry, fingerprint: str, resume: bool,
           progress: Callable[[int, int], None] | None) -> LayoutHeader:
    n, header_bytes, file_bytes = g.n_layers, g.header_bytes, g.file_bytes
    offsets = tuple(header_bytes + i * g.layer_bytes for i in range(n))
    bias_offset = header_bytes + n * g.layer_bytes
    partial = path.with_name(path.name + ".partial")
    crcs = _resume_point(partial, g, fingerprint, file_bytes) if resume else []
    if crcs:
        log.info("flash: resuming %s at layer %d of %d", partial, len(crcs), n)
    else:
        with open(partial, "wb") as f:
            f.truncate(file_bytes)
    bias_step = (g.d_ffn + g.d_model) * 4
    with open(partial, "r+b") as f:
        for i in range(len(crcs), n):
            layer = source(i)
            block = _layer_block(g, layer)
            f.seek(offsets[i])
            f.write(block.data)
            if g.has_bias:
                f.seek(bias_offset + i * bias_step)
                f.write(_bias_vector(g, layer).data)
            crcs.append(zlib.crc32(block))
            del layer, block
            f.flush()
            os.fsync(f.fileno())
            _drop_page_cache(f.fileno())  # written pages would otherwise fill the page cache
            _progress(partial).write_text(json.dumps(
                {"geometry": dataclasses.asdict(g), "fingerprint": fingerprint,
                 "layer_crcs": crcs}))
            if progress is not None:
                progress(i + 1, n)
        f.seek(bias_offset)
        bias = f.read(g.bias_bytes)
        header = LayoutHeader(geometry=g, header_bytes=header_bytes, layer_offsets=offsets,
                              layer_crcs=tuple(crcs), bias_offset=bias_offset,
                              bias_crc=zlib.crc32(bias), file_bytes=file_bytes,
                              fingerprint=fingerprint)
        doc = header.to_json()
        if _PREFIX.size + len(doc) > header_bytes:
            raise AssertionError("flash header larger than its reserved block")
        f.seek(0)
        f.write(_PREFIX.pack(MAGIC, VERSION, header_bytes, len(doc), zlib.crc32(doc)) + doc)
        f.flush()
        os.fsync(f.fileno())
        _drop_page_cache(f.fileno())  # the file is for flash reads, not the page cache
    os.replace(partial, path)
    _progress(partial).unlink(missing_ok=True)
    return header


def read_header(path: str | os.PathLike) -> LayoutHeader:
    """The header, after the magic, version, checksum and file-size checks."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            prefix = f.read(_PREFIX.size)
            if len(prefix) < _PREFIX.size:
                raise LayoutError(f"{path}: {size} bytes, too short for a flash weight file")
            magic, version, header_bytes, json_bytes, json_crc = _PREFIX.unpack(prefix)
            if magic != MAGIC:
                raise LayoutError(f"{path}: not a powerbench flash weight file (bad magic "
                                  f"{magic!r})")
            if version != VERSION:
                raise LayoutError(f"{path}: layout version {version}, this code reads {VERSION}")
            doc = f.read(json_bytes)
    except OSError as err:
        raise LayoutError(f"{path}: unreadable ({err})") from err
    if len(doc) != json_bytes or zlib.crc32(doc) != json_crc:
        raise LayoutError(f"{path}: header checksum mismatch (corrupt header)")
    try:
        header = LayoutHeader.from_json(doc)
    except (ValueError, TypeError, KeyError) as err:
        raise LayoutError(f"{path}: malformed header ({err})") from err
    if header.header_bytes != header_bytes or size < header.file_bytes:
        raise LayoutError(f"{path}: truncated ({size} bytes, the header says "
                          f"{header.file_bytes})")
    return header


def verify_payload(path: str | os.PathLike, header: LayoutHeader) -> None:
    """Compare every layer's and the biases' CRC32 with the header's (reads the file)."""
    g = header.geometry
    with open(path, "rb") as f:
        for i, (off, crc) in enumerate(zip(header.layer_offsets, header.layer_crcs,
                                           strict=True)):
            f.seek(off)
            if zlib.crc32(f.read(g.layer_bytes)) != crc:
                raise LayoutError(f"{path}: layer {i} payload checksum mismatch (corrupt)")
        f.seek(header.bias_offset)
        if zlib.crc32(f.read(g.bias_bytes)) != header.bias_crc:
            raise LayoutError(f"{path}: bias payload checksum mismatch (corrupt)")


def open_layout(path: str | os.PathLike, geometry: LayoutGeometry | None = None,
                fingerprint: str | None = None, verify: Verify = "header") -> LayoutHeader:
    """Validate the file against the expected geometry and weights; `LayoutError` if not."""
    header = read_header(path)
    if geometry is not None and header.geometry != geometry:
        raise LayoutError(f"{path}: written for {header.geometry}, expected {geometry}")
    if fingerprint is not None and header.fingerprint != fingerprint:
        raise LayoutError(f"{path}: stale (written from weights {header.fingerprint}, these "
                          f"weights are {fingerprint})")
    if verify == "full":
        verify_payload(path, header)
    return header


def ensure_layout(path: str | os.PathLike, layers: Sequence[LayerFFN], geometry: LayoutGeometry,
                  fingerprint: str, verify: Verify = "header") -> tuple[LayoutHeader, bool]:
    """A valid file at `path` for these weights: reused if it checks out, else (re)written
    with one warning saying why. Returns (header, rewritten)."""
    if Path(path).exists():
        try:
            return open_layout(path, geometry, fingerprint, verify), False
        except LayoutError as err:
            warnings.warn(f"flash weight file rebuilt: {err}", RuntimeWarning, stacklevel=2)
    header = write_layout(path, layers, geometry, fingerprint)
    log.info("flash: wrote %s (%.1f MB)", path, header.file_bytes / 1e6)
    return header, True


def _file_parts(g: LayoutGeometry, raw: np.ndarray) -> tuple[Tensor, ...]:
    """One layer's bytes in file order -> its parts, [d_ffn, d_model] each (copies)."""
    cn, rb, nc = g.cluster_neurons, g.row_bytes, g.n_clusters
    if g.bundled:
        body = raw.reshape(nc, g.cluster_bytes)[:, : cn * g.bundle_bytes]
        rows = [body.reshape(nc, cn, g.n_parts, rb)[:, :, p] for p in range(g.n_parts)]
    else:
        body = raw.reshape(g.n_parts, nc, g.part_stride)[:, :, : cn * rb]
        rows = [body[p].reshape(nc, cn, rb) for p in range(g.n_parts)]
    return tuple(torch.from_numpy(np.ascontiguousarray(r).reshape(nc * cn, rb)[: g.d_ffn])
                 .view(g.torch_dtype) for r in rows)


def read_layout(path: str | os.PathLike) -> tuple[LayoutHeader, list[LayerFFN]]:
    """Every layer back as tensors (buffered reads; for checks and tests)."""
    header = read_header(path)
    g = header.geometry
    layers = []
    with open(path, "rb") as f:
        for off in header.layer_offsets:
            f.seek(off)
            raw = np.frombuffer(f.read(g.layer_bytes), dtype=np.uint8)
            layers.append(LayerFFN(_file_parts(g, raw)))
        if g.has_bias:
            f.seek(header.bias_offset)
            vec = torch.frombuffer(bytearray(f.read(g.bias_bytes)), dtype=torch.float32)
            step = g.d_ffn + g.d_model
            layers = [LayerFFN(layer.parts, vec[i * step: i * step + g.d_ffn].clone(),
                               vec[i * step + g.d_ffn: (i + 1) * step].clone())
                      for i, layer in enumerate(layers)]
    return header, layers
