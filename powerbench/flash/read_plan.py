"""Extents of the weight file grouped into reads (no I/O here).

A batch of extents is sorted by file offset; extents adjacent in the file are coalesced
into one read (a scatter read into their places, which may lie in several buffers, up to
`max_read_bytes` and `IOV_MAX` pieces). `aligned_buffer` gives the page-aligned buffers
that O_DIRECT reads need.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass

import numpy as np

from powerbench.flash.layout import LayoutGeometry

IOV_MAX = 1024
BLOCK = 4096


def aligned_buffer(nbytes: int) -> np.ndarray:
    """uint8 [nbytes] backed by an anonymous mmap: page aligned, as O_DIRECT wants."""
    size = max(-(-int(nbytes) // BLOCK) * BLOCK, BLOCK)
    buf = mmap.mmap(-1, size)
    return np.frombuffer(buf, dtype=np.uint8)[:nbytes]


@dataclass(frozen=True)
class ReadOp:
    """One system call: `pieces` = (buffer, dest_offset, length) placed back to back in
    the file from `file_offset` on (a scatter read into one or several buffers)."""

    file_offset: int
    pieces: tuple[tuple[int, int, int], ...]

    @property
    def nbytes(self) -> int:
        return sum(n for _, _, n in self.pieces)


@dataclass(frozen=True)
class ReadPlan:
    """A batch of extents grouped into reads (numpy arrays, no per-read Python objects).

    Read j starts at file offset `op_offset[j]`, is `op_bytes[j]` long and fills pieces
    `op_first[j] .. op_first[j] + op_pieces[j] - 1`; piece i is `piece_len[i]` bytes into
    buffer `piece_buf[i]` at `piece_dest[i]`."""

    op_offset: np.ndarray
    op_bytes: np.ndarray
    op_first: np.ndarray
    op_pieces: np.ndarray
    piece_buf: np.ndarray
    piece_dest: np.ndarray
    piece_len: np.ndarray

    @property
    def n_reads(self) -> int:
        return int(self.op_offset.size)

    def ops(self) -> list[ReadOp]:
        out = []
        bufs, dests, lens = (a.tolist() for a in (self.piece_buf, self.piece_dest,
                                                   self.piece_len))
        for off, first, k in zip(self.op_offset.tolist(), self.op_first.tolist(),
                                 self.op_pieces.tolist(), strict=True):
            out.append(ReadOp(off, tuple(zip(bufs[first:first + k], dests[first:first + k],
                                             lens[first:first + k], strict=True))))
        return out


def plan_reads(file_offsets: np.ndarray, lengths: np.ndarray, dest_offsets: np.ndarray,
               max_read_bytes: int = 1 << 20, buffers: np.ndarray | None = None) -> ReadPlan:
    """Group extents adjacent in the file into reads: a run of neighbours is cut every
    `max_read_bytes` (an extent belongs to the read its first byte falls in), and at most
    `IOV_MAX` pieces per read. Extent i goes to buffer `buffers[i]` (default 0) at
    `dest_offsets[i]`; neighbours contiguous in the same buffer become one piece."""
    order = np.argsort(file_offsets, kind="stable")
    off = np.asarray(file_offsets, dtype=np.int64)[order]
    ln = np.asarray(lengths, dtype=np.int64)[order]
    dest = np.asarray(dest_offsets, dtype=np.int64)[order]
    buf = (np.zeros(off.size, dtype=np.int64) if buffers is None
           else np.asarray(buffers, dtype=np.int64)[order])
    n = off.size
    if n == 0:
        e = np.zeros(0, dtype=np.int64)
        return ReadPlan(e, e, e, e, e, e, e)
    cap = max(min(int(max_read_bytes), IOV_MAX * int(ln.min())), 1)
    new_run = np.ones(n, dtype=bool)
    new_run[1:] = off[1:] != off[:-1] + ln[:-1]
    run_start = off[new_run][np.cumsum(new_run) - 1]
    chunk = (off - run_start) // cap
    new_op = new_run.copy()
    new_op[1:] |= chunk[1:] != chunk[:-1]
    merge = np.zeros(n, dtype=bool)
    merge[1:] = ~new_op[1:] & (buf[1:] == buf[:-1]) & (dest[1:] == dest[:-1] + ln[:-1])
    starts = np.flatnonzero(~merge)
    piece_of = np.cumsum(~merge) - 1
    op_starts = np.flatnonzero(new_op)
    op_first = piece_of[op_starts]
    return ReadPlan(
        op_offset=off[op_starts], op_bytes=np.add.reduceat(ln, op_starts), op_first=op_first,
        op_pieces=np.diff(np.append(op_first, starts.size)), piece_buf=buf[starts],
        piece_dest=dest[starts], piece_len=np.add.reduceat(ln, starts))


def coalesce(file_offsets: np.ndarray, lengths: np.ndarray, dest_offsets: np.ndarray,
             max_read_bytes: int = 1 << 20, buffers: np.ndarray | None = None) -> list[ReadOp]:
    """`plan_reads` as a list of `ReadOp`s."""
    return plan_reads(file_offsets, lengths, dest_offsets, max_read_bytes, buffers).ops()


def bundled_plan(g: LayoutGeometry, base: int, clusters: np.ndarray, rows: np.ndarray
                 ) -> ReadPlan:
    """What `plan_reads(g.row_extents(...))` gives when no two `clusters` are neighbours
    in the file: read j = cluster j's bundles (layer at byte `base`), scattered into its
    arena `rows` ([n * cluster_neurons], cluster-major): one piece per part and neuron."""
    n, per = clusters.size, g.cluster_neurons * g.n_parts
    return ReadPlan(
        op_offset=base + clusters * g.cluster_bytes,
        op_bytes=np.full(n, per * g.row_bytes, dtype=np.int64),
        op_first=np.arange(n, dtype=np.int64) * per,
        op_pieces=np.full(n, per, dtype=np.int64),
        piece_buf=np.tile(np.arange(g.n_parts, dtype=np.int64), rows.size),
        piece_dest=np.repeat(rows * g.row_bytes, g.n_parts),
        piece_len=np.full(n * per, g.row_bytes, dtype=np.int64))
