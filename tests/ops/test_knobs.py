"""The compiled CPU kernels' run-time knobs (powerbench.ops.cpu_knobs): parsing and range
checks, and results that do not depend on them (prefetch distance, chunking, the pool's
spin and wake-up change speed only)."""

from __future__ import annotations

import itertools
import time

import pytest
import torch

from powerbench.ops.cpu_knobs import CpuKnobError, KnobSpec, knob_vector, parse_variant
from powerbench.threads import torch_threads

from . import reference as ref

SPECS = (KnobSpec("prefetch_bytes", 2048, 64, 65536), KnobSpec("spin_us", 100, 0, 10**6))


def test_variant_parsing():
    assert parse_variant("default", SPECS) == {}
    assert parse_variant(" ", SPECS) == {}
    assert parse_variant("prefetch_bytes:4096+spin_us:0", SPECS) == {"prefetch_bytes": 4096,
                                                                      "spin_us": 0}
    assert parse_variant("spin_us=7", SPECS) == {"spin_us": 7}
    assert knob_vector({"spin_us": 7}, SPECS) == [2048, 7]


@pytest.mark.parametrize("text, match", [
    ("prefetch:4096", "'prefetch' is unknown; valid: prefetch_bytes, spin_us"),
    ("prefetch_bytes:32", r"prefetch_bytes=32 is outside \[64, 65536\] \(default 2048\)"),
    ("spin_us:fast", "'spin_us:fast' is not name:<integer>"),
    ("spin_us", "'spin_us' is not name:<integer>"),
])
def test_bad_variants_name_the_knob_and_what_is_valid(text, match):
    with pytest.raises(CpuKnobError, match=match):
        parse_variant(text, SPECS)


def test_extension_reports_its_knobs_and_refuses_bad_values(cpu_ops):
    specs = {s.name: s for s in cpu_ops.knob_specs()}
    assert {"prefetch_bytes", "run_kb", "spin_us", "prewake"} <= set(specs)
    assert cpu_ops.knobs() == {n: s.default for n, s in specs.items()}
    with pytest.raises(CpuKnobError, match="outside"):
        cpu_ops.set_knobs({"prewake": 2})
    values = knob_vector({}, list(specs.values()))
    values[list(specs).index("prewake")] = 2
    with pytest.raises(ValueError, match="prewake=2 is outside"):  # the C++ check too
        torch.ops.powerbench_cpu.set_cpu_knobs(values)
    assert cpu_ops.knobs() == {n: s.default for n, s in specs.items()}


SETTINGS = ({}, {"prefetch_bytes": 64, "run_kb": 1}, {"prefetch_bytes": 65536, "run_kb": 4096},
            {"spin_us": 0}, {"spin_us": 0, "prewake": 1}, {"spin_us": 20000, "prewake": 1},
            {"wake_ahead_us": 0}, {"spin_us": 0, "wake_ahead_us": 100000},
            {"wake_ahead_pct": 50},
            {"wide_adjacent_pct": 0}, {"wide_adjacent_pct": 101},
            {"wide_adjacent_pct": 101, "prefetch_bytes": 64},
            {"one_slot_adjacent_pct": 1}, {"one_slot_adjacent_pct": 95},
            {"one_slot_adjacent_pct": 1, "prefetch_bytes": 65536},
            {"stream_loop": 0}, {"stream_loop": 0, "one_slot_adjacent_pct": 1},
            {"axpy_min_slots": 1}, {"axpy_min_slots": 8},
            {"axpy_split_chain": 0}, {"axpy_split_chain": 2})


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_results_do_not_depend_on_the_knobs(cpu_ops, gen, dtype):
    """Row products are bit-identical under every setting (each row's dot product is one
    thread's); the FFN (axpy partial sums per worker) matches float64."""
    w1 = (torch.randn(700, 300, generator=gen) * 0.1).to(dtype)
    w2_t = (torch.randn(700, 300, generator=gen) * 0.1).to(dtype)
    x = torch.randn(5, 300, generator=gen).to(dtype)
    idx = torch.randperm(700, generator=gen)[:401].sort().values
    outs = []
    try:
        for values in SETTINGS:
            cpu_ops.set_knobs(values)
            outs.append(cpu_ops.row(w1, x, idx))
            y = cpu_ops.ffn_relu(x, w1, None, w2_t, None, idx)
            ref.assert_close(y, ref.ffn_relu(x, w1, None, w2_t, None, idx), dtype)
    finally:
        cpu_ops.set_knobs({})
    for out in outs[1:]:
        assert torch.equal(out, outs[0])


@pytest.mark.parametrize("wake_ahead_us, pct", [(0, 0), (300, 0), (100000, 0), (50, 60)])
def test_calls_at_a_steady_pace_with_sleeping_helpers(cpu_ops, gen, wake_ahead_us, pct):
    """Helpers that sleep between calls (spin_us 0) and wake by the clock before the next
    call is due (wake_ahead_us, or wake_ahead_pct of the gap; 100 ms: every wake is early
    and times out) still take part in every job and leave the results unchanged."""
    w = torch.randn(4096, 256, generator=gen)
    x = torch.randn(1, 256, generator=gen)
    idx = torch.arange(0, 4096, 2)
    expected = cpu_ops.row(w, x, idx)
    try:
        cpu_ops.set_knobs({"spin_us": 0, "wake_ahead_us": wake_ahead_us, "wake_ahead_pct": pct})
        for _ in range(12):
            time.sleep(0.002)
            assert torch.equal(cpu_ops.row(w, x, idx), expected)
        with torch_threads(2):
            assert cpu_ops.threads_used() == 2
    finally:
        cpu_ops.set_knobs({})


# Rows of 4 KiB and more prefetch `prefetch_bytes` ahead and switch to the next row's lines
# at row_bytes - prefetch_bytes, which odd lengths put inside a loop step; K = 2085 and 4133
# are odd and not multiples of any vector width. Ids: all rows, the even rows and a random
# half, each including the last row, read with one slot per thread where the ids are
# consecutive (knob one_slot_adjacent_pct 95) or with 4 slots, and 8 (AVX-512) or 4 where
# they are scattered (knob wide_adjacent_pct 60 or 0), or 8 for every gather and the dense
# kernel (101, the default).
SLOT_SETTINGS = ({"one_slot_adjacent_pct": 95, "wide_adjacent_pct": 60, "axpy_split_chain": 0},
                 {"one_slot_adjacent_pct": 0, "wide_adjacent_pct": 0, "axpy_split_chain": 2},
                 {"one_slot_adjacent_pct": 0, "wide_adjacent_pct": 101})  # 8 slots, dense too
LONG_ROWS = ((97, 2085), (41, 4133))


@pytest.mark.parametrize("loop", [0, 1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_long_odd_rows_on_every_path_under_both_stream_loops(cpu_ops, isa, gen, dtype, loop):
    """The batch-1 row loops with the prefetch cut at the row switch (stream_loop 1) and with
    a select per line (0), on every ISA path, against float64: row, axpy (fp32: two slots
    at least, knob axpy_min_slots), the gated FFN and the dense kernel, under each slot
    rule (one slot, 4, 8), the batch-1 axpy with one FMA chain per row group and with two
    (knob axpy_split_chain 0, 2, and the default: two for fp32 rows)."""
    try:
        for slots, (n, k) in itertools.product(SLOT_SETTINGS, LONG_ROWS):
            cpu_ops.set_knobs({"stream_loop": loop, **slots})
            w = (torch.randn(n, k, generator=gen) * 0.1).to(dtype)
            x = torch.randn(1, k, generator=gen).to(dtype)
            # the dense kernel follows the same slot rule, as a gather of every row
            ref.assert_close(cpu_ops.prepare_linear()(x, w, None),
                             ref.row(w, x, torch.arange(n)), dtype)
            half = torch.randperm(n - 1, generator=gen)[: n // 2]
            for idx in (torch.arange(n), torch.arange(0, n, 2),
                        torch.cat([half, torch.tensor([n - 1])]).sort().values):
                ref.assert_close(cpu_ops.row(w, x, idx), ref.row(w, x, idx), dtype)
                c = torch.randn(1, idx.numel(), generator=gen).to(dtype)
                ref.assert_close(cpu_ops.axpy(w, c, idx), ref.axpy(w, c, idx), dtype)
                ref.assert_close(cpu_ops.ffn_gated(x, w, w, w, idx, "swiglu"),
                                 ref.ffn_gated(x, w, w, w, idx, "swiglu"), dtype)
    finally:
        cpu_ops.set_knobs({})
