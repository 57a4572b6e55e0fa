"""Weights on 2 MiB pages (powerbench.ops.huge_pages): the advice, its record, its no-ops."""

from __future__ import annotations

import sys

import pytest
import torch

from powerbench.ops import huge_pages as hp

MiB = 1 << 20
THP_USABLE = sys.platform.startswith("linux") and hp.thp_mode() in ("always", "madvise")
# OWN_MAPPING: the tensors that must land wholly on huge pages are over 32 MiB, glibc's
# largest mmap threshold, so each is a fresh mapping of its own. A smaller one may come from
# the heap, where the worker's earlier tests can leave a mapping boundary inside a 2 MiB
# block; the kernel cannot back that block with one huge page, and both advices still
# succeed (seen in CI: a 12 MiB tensor counted 8268 of 10240 KiB, 4 huge pages and 76 KiB,
# probably a boundary 76 KiB into the first block). They also hold nonzero values: Linux >= 6.12
# may split an all-zeros huge page when memory runs short (the underused-THP shrinker).
BIG = 9 * MiB  # float32 elements: 36 MiB


def test_aligned_range_rounds_inward():
    assert hp.aligned_range(0, 4 * MiB) == (0, 4 * MiB)
    assert hp.aligned_range(1, 4 * MiB) == (2 * MiB, 4 * MiB)
    assert hp.aligned_range(4096, 3 * MiB) == (2 * MiB, 2 * MiB)  # empty: nothing fits
    assert hp.aligned_range(2 * MiB - 1, 2 * MiB + 2) == (2 * MiB, 4 * MiB)


def test_smaps_parser_clips_to_the_range(tmp_path):
    smaps = tmp_path / "smaps"
    smaps.write_text(
        "00200000-00600000 rw-p 00000000 00:00 0\n"
        "Size:               4096 kB\n"
        "AnonHugePages:      4096 kB\n"
        "00600000-00a00000 rw-p 00000000 00:00 0 [heap]\n"
        "AnonHugePages:      2048 kB\n"
        "7f0000000000-7f0000400000 r--p 00000000 08:01 42 /lib/x.so\n"
        "AnonHugePages:      4096 kB\n")
    assert hp.huge_bytes_in(0x200000, 0x600000, smaps) == 4 * MiB
    # half of the first mapping, all of the second (whose 2 MiB count is below its overlap)
    assert hp.huge_bytes_in(0x400000, 0xA00000, smaps) == 2 * MiB + 2 * MiB
    assert hp.huge_bytes_in(0xA00000, 0xC00000, smaps) == 0
    assert hp.huge_bytes_in(0, MiB, tmp_path / "missing") == 0


def test_small_tensor_is_a_recorded_no_op():
    t = torch.arange(1000, dtype=torch.float32)
    done = hp.use_huge_pages(t)
    assert done.huge_bytes == 0 and done.nbytes == 4000
    assert done.reason and (not THP_USABLE or "smaller" in done.reason)
    assert torch.equal(t, torch.arange(1000, dtype=torch.float32))


def test_without_thp_it_says_why(monkeypatch):
    monkeypatch.setattr(hp, "thp_mode", lambda: "never")
    done = hp.use_huge_pages(torch.zeros(4 * MiB))
    assert done.huge_bytes == 0 and "never" in done.reason


@pytest.mark.skipif(not THP_USABLE, reason="needs Linux with transparent huge pages "
                    "in mode always or madvise")
def test_collapse_keeps_contents_and_addresses():
    gen = torch.Generator().manual_seed(0)
    t = torch.randn(4097, 4099, generator=gen).to(torch.float16)  # ~32.03 MiB, odd sizes
    before, ptr = t.clone(), t.data_ptr()
    start, end = hp.aligned_range(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
    done = hp.use_huge_pages(t)
    assert done.reason == "", done.reason
    assert done.huge_bytes == end - start >= 2 * MiB  # every whole huge page inside it
    assert done.fraction == pytest.approx((end - start) / t.untyped_storage().nbytes())
    assert t.data_ptr() == ptr and torch.equal(t, before)
    assert hp.use_huge_pages(t, advise=False).huge_bytes == done.huge_bytes  # measured only
    assert hp.use_huge_pages(t) == done  # idempotent


def test_mapped_file_names_a_file_mapping_only(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(
        "00200000-00600000 rw-p 00000000 00:00 0 \n"
        "00600000-00a00000 rw-p 00000000 00:00 0                          [heap]\n"
        "7f0000000000-7f0000400000 rw-p 00000000 fe:00 42   /data/model one.safetensors\n")
    assert hp.mapped_file(0x300000, maps) == ""
    assert hp.mapped_file(0x700000, maps) == ""
    assert hp.mapped_file(0x7F0000000010, maps) == "/data/model one.safetensors"
    assert hp.mapped_file(0x7F0000400000, maps) == ""  # past the end
    assert hp.mapped_file(0, tmp_path / "missing") == ""


@pytest.mark.skipif(not THP_USABLE, reason="needs Linux with transparent huge pages")
def test_a_memory_mapped_checkpoint_is_named_in_the_reason(tmp_path):
    # as transformers loads safetensors: a private, writable mapping of the file
    np = pytest.importorskip("numpy")
    path = tmp_path / "weights.bin"
    np.full(3 * MiB, 1.5, dtype=np.float32).tofile(path)  # 12 MiB: whole huge pages inside
    t = torch.from_numpy(np.memmap(path, dtype=np.float32, mode="c"))
    assert hp.mapped_file(t.data_ptr()) == str(path)
    done = hp.use_huge_pages(t)
    if done.huge_bytes < done.nbytes - 4 * MiB:  # refused (kernels without file THP here)
        assert "memory-mapped from weights.bin" in done.reason, done.reason
    assert float(t[123]) == 1.5


@pytest.mark.skipif(not THP_USABLE, reason="needs Linux with transparent huge pages")
def test_views_of_one_storage_count_once():
    base = torch.ones(BIG)  # OWN_MAPPING
    a, b = base[: MiB], base[MiB:]
    done = hp.use_huge_pages_all([a, None, b, base])
    assert done.nbytes == base.untyped_storage().nbytes()
    assert done.huge_bytes >= 34 * MiB and done.reason == ""


@pytest.mark.skipif(not THP_USABLE, reason="needs Linux with transparent huge pages")
def test_small_tensors_beside_big_ones_give_no_reason():
    big, small = torch.ones(BIG), torch.ones(16)  # OWN_MAPPING; 64 bytes
    done = hp.use_huge_pages_all([small, big])
    assert done.huge_bytes >= 34 * MiB and done.reason == ""
    assert hp.use_huge_pages_all([small]).reason == hp.TOO_SMALL


@pytest.mark.skipif(not THP_USABLE, reason="needs Linux with transparent huge pages")
def test_engine_weights_go_onto_huge_pages():
    from powerbench.engine.synthetic import synthetic_decoder_weights
    from powerbench.engine.weights import use_huge_pages
    from powerbench.model.spec import FFNKind, ModelSpec

    spec = ModelSpec(name="t", n_layers=1, d_model=512, d_ffn=2048, n_heads=8,
                     n_kv_heads=8, vocab_size=64, max_positions=32, ffn_kind=FFNKind.reglu)
    weights = synthetic_decoder_weights(spec, torch.float32, huge_pages=False)
    ffn = weights.layers[0].ffn
    w_down_t = ffn.w_down_t.clone()
    done = use_huge_pages(weights)
    assert ffn._gate_up is not None  # stacked first: the matrix the decoder reads
    assert ffn.w_gate.untyped_storage().data_ptr() == ffn.gate_up()[0].data_ptr()
    assert done.huge_bytes >= 3 * 2 * MiB  # gate/up (8 MiB), down and down^T (4 MiB each)
    assert torch.equal(ffn.w_down_t, w_down_t)
