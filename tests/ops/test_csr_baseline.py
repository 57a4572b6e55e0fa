"""The conventional sparse operator (torch CSR, powerbench.ops.csr_baseline) against float64,
and as a bench-operators contender."""

from __future__ import annotations

import pytest
import torch

from powerbench.ops import bench, csr_baseline
from tests.ops import reference as ref


@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("op", bench.OPS)
def test_every_op_matches_float64_on_odd_sizes(op, index_dtype, gen):
    d_model, d_ffn, batch = 37, 101, 3
    layer = bench.LayerData.make(d_model, d_ffn, torch.float32, "cpu", gen)
    x = torch.rand(batch, d_model, generator=gen)
    coeffs = torch.rand(batch, d_ffn, generator=gen) + 0.5
    idx = torch.tensor([0, 5, 6, 42, 99, 100])  # both ends, neighbours
    n = idx.numel()
    conventional = csr_baseline.ConventionalSparse(index_dtype, huge_pages=False)
    out = conventional.fn(op, layer, x, coeffs, idx)()
    if op == "row":
        want = ref.row(layer.w_gate, x, idx, scatter=True)
    elif op == "axpy":
        want = ref.axpy(layer.w_down_t, coeffs[:, :n], idx)
    elif op == "ffn_relu":
        want = ref.ffn_relu(x, layer.w_gate, layer.b1, layer.w_down_t, layer.b2, idx)
    else:
        want = ref.ffn_gated(x, layer.w_gate, layer.w_up, layer.w_down_t, idx, "reglu")
    ref.assert_close(out, want, torch.float32)


def test_csr_stores_only_the_active_rows_and_columns(gen):
    w = torch.randn(9, 5, generator=gen)
    idx = torch.tensor([7, 2])  # unsorted: CSR keeps row order
    rows = csr_baseline.csr_rows(w, idx)
    assert rows.values().numel() == 2 * 5 and rows.col_indices().dtype == torch.int64
    for m in (rows, csr_baseline.csr_columns(w, idx, torch.int32)):  # torch's own checks
        torch.sparse_csr_tensor(m.crow_indices(), m.col_indices(), m.values(), m.shape,
                                check_invariants=True)
    dense = rows.to_dense()
    assert torch.equal(dense[[2, 7]], w[[2, 7]]) and dense[[0, 1, 3, 4, 5, 6, 8]].abs().sum() == 0
    cols = csr_baseline.csr_columns(w, idx, torch.int32).to_dense()  # W = w^T [5, 9]
    assert cols.shape == (5, 9) and torch.equal(cols[:, [2, 7]], w[[2, 7]].t())
    assert cols[:, [0, 1, 3]].abs().sum() == 0


def test_a_dtype_without_a_csr_kernel_is_refused(gen):
    layer = bench.LayerData.make(8, 16, torch.float16, "cpu", gen)
    assert not csr_baseline.supports(torch.float16) and csr_baseline.supports(torch.float32)
    with pytest.raises(TypeError, match="CSR product takes"):
        csr_baseline.ConventionalSparse().fn("row", layer, torch.rand(1, 8).half(),
                                             torch.rand(1, 16).half(), torch.tensor([1]))


def test_benchmark_times_it_on_fp32_and_leaves_fp16_out(backends):
    cfg = bench.OperatorBenchConfig(
        shapes=("32x128",), dtypes=("fp32", "fp16"), batches=(1,), sparsities=(0.0, 0.9),
        ops=("row", "ffn_gated"), backends=("torch_csr",),
        timing=bench.TimingPolicy(warmup=0, reps=1, min_time_s=0.0, flush_mb=0),
        bandwidth_mb=16, huge_pages=False)
    lines: list[str] = []
    rows, _ = bench.run_benchmark(cfg, lines.append)
    csr = [r for r in rows if r.backend == "torch_csr"]
    assert {(r.op, r.dtype, r.sparsity) for r in csr} == {
        (op, "fp32", s) for op in ("row", "ffn_gated") for s in (0.0, 0.9)}
    assert all(r.time_us > 0 and r.isa == "" for r in csr)
    assert any("torch_csr left out (no fp16 kernel)" in line for line in lines)


def test_an_unknown_backend_names_the_valid_ones():
    with pytest.raises(ValueError, match="valid: .*torch_csr"):
        bench.make_contenders(bench.OperatorBenchConfig(backends=("csr",)))
