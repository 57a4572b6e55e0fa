"""bench-powerinfer-ops: the driver's output, the checkout checks, the build and the table
(a stand-in ggml and driver: PowerInfer's sources are not part of this repository)."""

from __future__ import annotations

import math
import shutil
from dataclasses import replace

import pytest

import powerbench.measure.powerinfer_ops as pio
from powerbench.measure.powerinfer_ops import (
    DriverRun,
    OpTiming,
    PowerInferOpsConfig,
    PowerInferSourceError,
    Workload,
    build_driver,
    check_checkout,
    parse_driver_output,
    powerinfer_ops_report,
    report_rows,
    sparse_cpu_run,
)
from powerbench.schema_helpers import ConfigRangeError
from powerbench.tasks.config import BenchPowerInferOpsTask
from powerbench.threads import doubling_counts

OUTPUT = """read threads 2 gbps 30.000
op sparse_up sparsity 0.9000 active 1638 ms_per_layer 1.1000 gbps 12.000
op dense_ffn sparsity 0.0000 active 16384 ms_per_layer 11.0000 gbps 24.000
"""


def test_the_driver_output_parses_line_by_line():
    run = parse_driver_output("noise\n" + OUTPUT)
    assert run.read_gbps == 30.0
    assert run.ops == (OpTiming("sparse_up", 0.9, 1638, 1.1, 12.0),
                       OpTiming("dense_ffn", 0.0, 16384, 11.0, 24.0))


def test_output_without_the_read_line_is_an_error_that_shows_it():
    with pytest.raises(ValueError, match="no `read threads"):
        parse_driver_output("op sparse_up sparsity 0.9 active 1 ms_per_layer 1 gbps 1\n")


def test_a_missing_or_incomplete_checkout_says_what_lacks_and_how_to_get_it(tmp_path):
    with pytest.raises(PowerInferSourceError, match="task.powerinfer_dir is not set.*git clone"):
        check_checkout(None)
    (tmp_path / "ggml.c").write_text("")
    with pytest.raises(PowerInferSourceError, match=r"lacks ggml-quants.c, ggml-alloc.c, "
                       r"ggml-backend.c, ggml.h \(with network: git clone"):
        check_checkout(tmp_path)


def test_rows_take_medians_over_rounds_and_share_of_read_and_dense():
    def run(read, up, dense):
        return DriverRun(read, (OpTiming("sparse_up", 0.9, 1638, 1.0, up),
                                OpTiming("dense_up", 0.0, 16384, 8.0, 20.0),
                                OpTiming("dense_ffn", 0.0, 16384, 10.0, dense)))

    rows = report_rows({("native", 2): [run(30, 12, 24), run(20, 6, 20), run(40, 9, 30)]})
    up = next(r for r in rows if r["op"] == "sparse_up")
    assert (up["gbps"], up["read_gbps"], up["gbps_per_thread"]) == (9, 30, 4.5)
    assert up["read_share"] == 0.3 and up["dense_ffn_share"] == round(9 / 24, 3)
    assert up["sparsity_pct"] == 90 and up["threads"] == 2 and up["build"] == "native"
    assert up["speedup_vs_dense"] == 8.0  # dense_up's 8 ms over sparse_up's 1 ms
    # ours (no read of its own) is divided by the driver's read at the same thread count
    ours = report_rows({("native", 2): [run(30, 12, 24)],
                        ("sparse_cpu", 2): [run(math.nan, 15, 30)]})
    mine = next(r for r in ours if r["build"] == "sparse_cpu" and r["op"] == "sparse_up")
    assert mine["read_gbps"] == 30 and mine["read_share"] == 0.5


def test_our_operators_are_timed_the_way_the_driver_times_ggml():
    """sparse_cpu_run on a small shape: every op of the driver, active rows of each
    sparsity, GB/s from the rows read (skipped where the extension does not build)."""
    from powerbench.ops.registry import BackendUnavailable, get_backend

    try:
        get_backend("sparse_cpu", fallback=False)
    except BackendUnavailable as err:
        pytest.skip(str(err))
    work = Workload(d_model=256, d_ffn=1024, layers=2, passes=2, reps=1, sparsities=(0.5, 0.9))
    run = sparse_cpu_run(1, work, flush_mb=4)
    assert math.isnan(run.read_gbps)  # the report uses the driver's read
    cells = {(t.op, t.sparsity): t for t in run.ops}
    assert set(cells) == {(op, s) for op in ("sparse_up", "sparse_down", "sparse_ffn")
                          for s in (0.5, 0.9)} | {("dense_up", 0.0), ("dense_down", 0.0),
                                                  ("dense_ffn", 0.0)}
    assert cells[("sparse_ffn", 0.9)].active == 102 and cells[("dense_ffn", 0.0)].active == 1024
    for t in run.ops:  # GB/s is the rows read over the time: 4 layer calls of 256 fp16 each
        mats = 2 if t.op.endswith("ffn") else 1
        assert t.gbps == pytest.approx(mats * t.active * 256 * 2 / (t.ms_per_layer * 1e6))
    # fp32, as the driver runs it: the up projection alone, 4 bytes a weight
    run = sparse_cpu_run(1, replace(work, dtype="fp32", sparsities=(0.9,)), flush_mb=4)
    assert {(t.op, t.sparsity) for t in run.ops} == {("dense_up", 0.0), ("sparse_up", 0.9)}
    for t in run.ops:
        assert t.gbps == pytest.approx(t.active * 256 * 4 / (t.ms_per_layer * 1e6))


def test_default_thread_counts_double_up_to_the_cores():
    assert doubling_counts(1) == [1]
    assert doubling_counts(2) == [1, 2]
    assert doubling_counts(6) == [1, 2, 4, 6]
    assert doubling_counts(16) == [1, 2, 4, 8, 16]
    assert doubling_counts(0) == [1]


def test_task_options_are_checked_when_composed():
    with pytest.raises(ConfigRangeError, match="task.isas='sse' is not an option; valid: "
                       "native, avx2"):
        BenchPowerInferOpsTask(isas=["sse"])
    with pytest.raises(ConfigRangeError, match="task.threads"):
        BenchPowerInferOpsTask(threads=[0])
    with pytest.raises(ValueError, match="unknown ISA build 'sse'"):
        build_driver(None, "sse", None)
    with pytest.raises(ConfigRangeError, match="task.dtype='bf16' is not an option; valid: "
                       "fp16, fp32"):
        BenchPowerInferOpsTask(dtype="bf16")
    with pytest.raises(ConfigRangeError, match="task.shape='4096' is not d_model x d_ffn"):
        BenchPowerInferOpsTask(shape="4096")
    with pytest.raises(ConfigRangeError, match="1000 < task.shape's d_ffn"):
        BenchPowerInferOpsTask(shape="4096x512")  # ggml_mul_mat_idx would not gather
    assert BenchPowerInferOpsTask(shape="4096X4096", dtype="fp32").dims == (4096, 4096)


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                    reason="no C compiler")
def test_build_run_and_report_with_a_stand_in_checkout(tmp_path, monkeypatch):
    """The build compiles every ggml source and the driver, is reused while the inputs are
    the same and redone when one changes; the report has a row per (ISA, threads, op)."""
    checkout = tmp_path / "PowerInfer"
    checkout.mkdir()
    (checkout / "ggml.h").write_text("int ggml_stub(void);\n")
    for name in pio.GGML_SOURCES:
        fn = name.replace("-", "_").removesuffix(".c")
        (checkout / name).write_text(f"int {fn}(void) {{ return 1; }}\n")
    driver = tmp_path / "driver.c"
    driver.write_text('#include <stdio.h>\n#include <stdlib.h>\n#include "ggml.h"\n'
                      "int main(int c, char** v) { int t = atoi(v[1]);\n"
                      '  printf("read threads %d gbps %.3f\\n", t, 10.0 * t);\n'
                      '  printf("op sparse_up sparsity %s active 100 ms_per_layer 1.0 '
                      'gbps %.3f\\n", v[8], 2.0 * t);\n'
                      '  printf("op dense_ffn sparsity 0.0000 active 16384 ms_per_layer 9.0 '
                      'gbps %.3f\\n", 8.0 * t);\n  return 0; }\n')
    monkeypatch.setattr(pio, "DRIVER", driver)
    build_root = tmp_path / "build"
    first = build_driver(checkout, "avx2", build_root)
    assert build_driver(checkout, "avx2", build_root) == first  # reused
    (checkout / "ggml.c").write_text("int ggml(void) { return 2; }\n")
    assert build_driver(checkout, "avx2", build_root) != first  # a changed source rebuilds

    cfg = PowerInferOpsConfig(checkout=checkout, build_root=build_root, isas=("avx2",),
                              threads=(1, 2), rounds=2, work=Workload(sparsities=(0.9,)),
                              ours=False)
    report = powerinfer_ops_report(cfg)
    assert report.study == "operators_cpu" and report.name == "powerinfer_ops"
    assert "fp16, 4096x16384" in report.title and "x 8 KiB per matrix" in report.notes[1]
    by_key = {(r["threads"], r["op"]): r for r in report.rows}
    assert set(by_key) == {(1, "sparse_up"), (1, "dense_ffn"), (2, "sparse_up"),
                           (2, "dense_ffn")}
    assert by_key[(2, "sparse_up")]["gbps"] == 4.0
    assert by_key[(2, "sparse_up")]["read_share"] == 0.2
    assert math.isclose(by_key[(1, "sparse_up")]["dense_ffn_share"], 0.25)
    assert "commit unknown" in report.notes[0]

    # a CPU without AVX2 runs only the native build, and the page says so
    monkeypatch.setattr(pio, "cpu_flags", lambda: {"sse2"})
    report = powerinfer_ops_report(replace(cfg, isas=("avx2", "native"), threads=(1,),
                                           rounds=1))
    assert {r["build"] for r in report.rows} == {"native"}
    assert report.notes[-1] == "Not run: avx2 (this CPU lacks its instructions)."
    # another shape and dtype: its own report, the shape and the row bytes on the page
    report = powerinfer_ops_report(replace(cfg, isas=("native",), threads=(1,), rounds=1,
                                           work=Workload(4096, 4096, "fp32", sparsities=(0.1,))))
    assert report.name == "powerinfer_ops_4096x4096_fp32"
    assert "up-projection operator (" in report.title and "fp32, 4096x4096" in report.title
    assert "x 16 KiB per matrix" in report.notes[1] and report.params["dtype"] == "fp32"
    with pytest.raises(PowerInferSourceError, match=r"runs none of the ISA builds \['avx2'\]"):
        powerinfer_ops_report(replace(cfg, isas=("avx2",)))
