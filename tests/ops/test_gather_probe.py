"""The read-only gather probe (CpuSparseOps.gather_probe, the benchmark's ceiling) reads
exactly the rows asked for: its sum of each row's bytes as 32-bit words matches a plain
reference on every ISA path, both schedules, odd row lengths and sparse patterns."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from powerbench.ops.bench import LayerData
from powerbench.ops.bench_ceiling import PROBES, probe_calls, weight_matrices

DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.int8)


def reference(mats: list[torch.Tensor], idx: torch.Tensor) -> int:
    """Sum mod 2**32 of each listed row's bytes as little-endian uint32 words, the last
    partial word zero-padded (in Python integers: no overflow, no order)."""
    total = 0
    for m in mats:
        raw = m.contiguous().view(torch.uint8).numpy().reshape(m.shape[0], -1)
        for i in idx.tolist():
            b = raw[i].tobytes()
            b += b"\0" * (-len(b) % 4)
            total += int(np.frombuffer(b, dtype="<u4").astype(np.uint64).sum())
    return total % 2**32


def random_matrix(rows: int, cols: int, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """Every bit pattern, NaNs and subnormals included (the probe must not convert)."""
    nbytes = rows * cols * torch.empty(0, dtype=dtype).element_size()
    raw = torch.randint(0, 256, (nbytes,), generator=gen, dtype=torch.uint8)
    return raw.view(dtype).reshape(rows, cols)


@pytest.mark.parametrize("mode", PROBES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", [1, 3, 17, 33, 250, 1031])
def test_probe_sums_exactly_the_rows_read(cpu_ops, isa, gen, mode, dtype, cols):
    w = random_matrix(300, cols, dtype, gen)
    for idx in (torch.arange(300),                                  # every row (one run)
                torch.randperm(300, generator=gen)[:97].sort().values,  # scattered, sorted
                torch.randperm(300, generator=gen)[:131],           # unsorted
                torch.tensor([0, 1, 2, 3, 4, 150, 151, 299]),       # runs and ends
                torch.tensor([7]), torch.tensor([], dtype=torch.long)):
        assert cpu_ops.gather_probe([w], idx, mode) == reference([w], idx), (idx.numel(), mode)


@pytest.mark.parametrize("mode", PROBES)
def test_probe_over_several_matrices_and_threads(cpu_ops, isa, gen, mode):
    """An FFN's matrices in one call, large enough to run on every pool worker."""
    mats = [random_matrix(2048, 520, torch.float16, gen) for _ in range(3)]
    idx = torch.randperm(2048, generator=gen)[:1500].sort().values.to(torch.int32)
    with_threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert cpu_ops.gather_probe(mats, idx, mode) == reference(mats, idx)
    finally:
        torch.set_num_threads(with_threads)


def test_bench_probes_read_each_ops_matrices(cpu_ops, gen):
    layer = LayerData.make(64, 96, torch.float16, "cpu", gen)
    idx = torch.tensor([1, 2, 3, 40, 95])
    for op in ("row", "axpy", "ffn_relu", "ffn_gated"):
        want = reference(weight_matrices(op, layer), idx)
        assert [call() for call in probe_calls(cpu_ops, op, layer, idx)] == [want] * len(PROBES)
    assert probe_calls(None, "row", layer, idx) == []


def test_probe_rejects_bad_input(cpu_ops):
    w = torch.zeros(10, 8)
    with pytest.raises(ValueError, match="gather probe mode must be one of"):
        cpu_ops.gather_probe([w], torch.tensor([1]), "sorted")
    with pytest.raises(IndexError, match="out of range for 10 neurons"):
        cpu_ops.gather_probe([w], torch.tensor([10]))
    with pytest.raises(ValueError, match="same number of rows"):
        cpu_ops.gather_probe([w, torch.zeros(9, 8)], torch.tensor([1]))
