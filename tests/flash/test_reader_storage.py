"""The O_DIRECT reader (coalescing, fallback) and the storage microbenchmark."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest

from powerbench.flash import reader as reader_mod
from powerbench.flash.read_plan import aligned_buffer, coalesce
from powerbench.flash.reader import DirectReader
from powerbench.hardware.storage import measure_storage

BLOCK = 4096


@pytest.fixture
def data_file(tmp_path):
    data = np.random.default_rng(0).integers(0, 256, size=64 * BLOCK, dtype=np.uint8)
    path = tmp_path / "data.bin"
    path.write_bytes(data.tobytes())
    return path, data


def test_coalescing_merges_only_file_neighbours():
    offs = np.array([8, 0, 4, 20]) * BLOCK
    lens = np.full(4, BLOCK)
    dests = np.array([2, 0, 1, 3]) * BLOCK
    ops = coalesce(offs, lens, dests)
    assert [op.file_offset for op in ops] == [0, 4 * BLOCK, 8 * BLOCK, 20 * BLOCK]
    # blocks 0 and 4 are not adjacent; a run 4, 5 (two pieces in other buffer places) is
    ops = coalesce(np.array([4, 5, 6]) * BLOCK, np.full(3, BLOCK), np.array([3, 0, 1]) * BLOCK)
    assert len(ops) == 1 and ops[0].pieces == ((0, 3 * BLOCK, BLOCK), (0, 0, 2 * BLOCK))
    assert ops[0].nbytes == 3 * BLOCK
    # neighbours in the file going to two buffers: one read, one piece per buffer run
    ops = coalesce(np.array([4, 5, 6]) * BLOCK, np.full(3, BLOCK), np.array([0, 0, 1]) * BLOCK,
                   buffers=np.array([1, 0, 0]))
    assert len(ops) == 1 and ops[0].pieces == ((1, 0, BLOCK), (0, 0, 2 * BLOCK))
    capped = coalesce(np.arange(10) * BLOCK, np.full(10, BLOCK), np.arange(10) * BLOCK,
                      max_read_bytes=3 * BLOCK)
    assert [op.nbytes for op in capped] == [3 * BLOCK] * 3 + [BLOCK]


ENGINES = [("threads", 1), ("threads", 3), ("aio", 1)]


@pytest.mark.parametrize(("engine", "threads"), ENGINES)
def test_reads_land_where_asked(data_file, engine, threads):
    path, data = data_file
    blocks = np.array([7, 3, 4, 5, 60, 12])
    dest = aligned_buffer(len(blocks) * BLOCK)
    assert dest.ctypes.data % BLOCK == 0
    with DirectReader(path, io_threads=threads, engine=engine) as r:
        assert r.direct and r.engine == engine
        r.read(blocks * BLOCK, np.full(blocks.size, BLOCK), np.arange(blocks.size) * BLOCK, dest)
        assert r.stats.bytes_read == blocks.size * BLOCK
        assert r.stats.reads == 4  # 3, 4, 5 coalesced
    for i, b in enumerate(blocks):
        assert np.array_equal(dest[i * BLOCK:(i + 1) * BLOCK], data[b * BLOCK:(b + 1) * BLOCK])


@pytest.mark.parametrize("engine", ["threads", "aio"])
def test_scatter_into_several_buffers(data_file, engine):
    path, data = data_file
    a, b = aligned_buffer(2 * BLOCK), aligned_buffer(2 * BLOCK)
    with DirectReader(path, io_threads=2, engine=engine) as r:
        # blocks 10, 11 are neighbours: block 10 -> b[1], block 11 -> a[0]; block 30 -> a[1]
        r.read(np.array([10, 11, 30]) * BLOCK, np.full(3, BLOCK), np.array([1, 0, 1]) * BLOCK,
               [a, b], buffers=np.array([1, 0, 0]))
        assert r.stats.reads == 2
    assert np.array_equal(b[BLOCK:], data[10 * BLOCK:11 * BLOCK])
    assert np.array_equal(a[:BLOCK], data[11 * BLOCK:12 * BLOCK])
    assert np.array_equal(a[BLOCK:], data[30 * BLOCK:31 * BLOCK])


def test_aio_batches_larger_than_the_depth_and_overlap_with_the_caller(data_file):
    path, data = data_file
    blocks = np.arange(0, 64, 2)  # 32 reads, none adjacent
    dest = aligned_buffer(blocks.size * BLOCK)
    with DirectReader(path, engine="aio", depth=4, submit_thread=False) as r:
        pending = r.submit(blocks * BLOCK, np.full(blocks.size, BLOCK),
                           np.arange(blocks.size) * BLOCK, dest)
        assert pending.batch is not None and pending.batch.submitted == 4  # the rest later
        assert pending.wait() > 0 and pending.batch.finished
        assert r.stats.reads == 32 and r.stats.bytes_read == 32 * BLOCK
    for i, b in enumerate(blocks):
        assert np.array_equal(dest[i * BLOCK:(i + 1) * BLOCK], data[b * BLOCK:(b + 1) * BLOCK])


def test_falls_back_with_a_warning_where_o_direct_is_refused(data_file, monkeypatch):
    path, data = data_file
    real = reader_mod._open

    def refuse(p, flags):
        if flags & getattr(os, "O_DIRECT", 0):
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(p, flags)

    monkeypatch.setattr(reader_mod, "_open", refuse)
    with pytest.warns(RuntimeWarning, match="O_DIRECT refused"):
        r = DirectReader(path, io_threads=2)
    dest = aligned_buffer(BLOCK)
    r.read(np.array([BLOCK * 9]), np.array([BLOCK]), np.array([0]), dest)
    assert not r.direct and np.array_equal(dest, data[9 * BLOCK:10 * BLOCK])
    r.close()


@pytest.mark.parametrize("engine", ["threads", "aio"])
def test_a_read_past_the_end_fails(data_file, engine):
    path, _ = data_file
    dest = aligned_buffer(2 * BLOCK)
    with DirectReader(path, io_threads=1, engine=engine) as r, \
            pytest.raises(OSError, match="past the end"):
        r.read(np.array([63 * BLOCK]), np.array([2 * BLOCK]), np.array([0]), dest)


def test_storage_benchmark_gives_sane_numbers(tmp_path):
    st = measure_storage(tmp_path, file_mb=8, blocks_kb=(4, 64), queue_depths=(1, 2),
                         seconds=0.05)
    assert st.direct  # this file system takes O_DIRECT
    assert not list(tmp_path.iterdir())  # the scratch file is gone
    assert len(st.results) == 4
    for r in st.results:
        assert r.reads > 0 and 1e5 < r.bandwidth < 1e12 and 0 < r.latency_s < 1.0
    assert st.best_bandwidth(64 * 1024) >= st.result(64 * 1024, 1).bandwidth
    assert st.random_read_bw == max(r.bandwidth for r in st.results)
    figures = st.figures()
    assert figures["rand_read_4k_qd1_gb_s"] > 0 and figures["direct_io"] == 1.0
    with pytest.raises(KeyError):
        st.result(4096, 99)


def test_local_profile_records_storage_as_a_tier(tmp_path):
    from powerbench.hardware.config import LocalHardwareConfig
    from powerbench.hardware.local import storage_tier

    cfg = LocalHardwareConfig(storage_dir=str(tmp_path), storage_mb=8,
                              storage_queue_depths=[1, 2], storage_seconds=0.05)
    tier = storage_tier(cfg)
    assert tier.name == "flash" and tier.kind in ("ssd", "hdd")
    assert tier.effective_bw > 1e5 and tier.capacity_bytes > 0 and tier.peak_bw is None
    assert tier.effective_bw == pytest.approx(max(tier.extra["rand_read_512k_qd1_gb_s"],
                                                  tier.extra["rand_read_512k_qd2_gb_s"]) * 1e9)
    assert tier.extra["rand_read_4k_qd1_lat_us"] > 0


def test_aio_submission_from_a_worker_thread(data_file):
    path, data = data_file
    blocks = np.array([5, 17, 18, 40])
    dest = aligned_buffer(blocks.size * BLOCK)
    with DirectReader(path, engine="aio", submit_thread=True) as r:
        pending = r.submit(blocks * BLOCK, np.full(blocks.size, BLOCK),
                           np.arange(blocks.size) * BLOCK, dest)
        assert len(pending.futures) == 1  # the io_submit runs on a worker
        pending.wait()
        assert r.stats.reads == 3 and r.stats.bytes_read == blocks.size * BLOCK
    for i, b in enumerate(blocks):
        assert np.array_equal(dest[i * BLOCK:(i + 1) * BLOCK], data[b * BLOCK:(b + 1) * BLOCK])


def test_batches_the_compiled_planner_submitted_count_their_read_time(data_file):
    """`submitted_scatter` (reads io_submit'ed by compiled code): the batch's submit-to-
    completion time goes into `stats.busy_s` like every other batch's."""
    import time
    from types import SimpleNamespace

    path, _ = data_file
    batch = SimpleNamespace(finished=False, read_bytes=BLOCK, pending=0)
    batch.wait = lambda: setattr(batch, "finished", True)
    with DirectReader(path, engine="threads", direct=False) as r:
        started = time.perf_counter() - 0.01
        r.submitted_scatter(batch, 3, 3, started).wait()
        assert r.stats.reads == 3 and r.stats.bytes_read == 3 * BLOCK
        assert r.stats.busy_s >= 0.01
