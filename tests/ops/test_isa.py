"""ISA path selection ($POWERBENCH_CPU_ISA, powerbench.ops.isa) and the paths agreeing with
each other and with float64 where the kernels differ most (the vector exp of SwiGLU, fp16
and bf16 rounding in registers)."""

from __future__ import annotations

import warnings

import pytest
import torch

from powerbench.ops import CpuIsaError, clear_cache, get_backend
from powerbench.ops.isa import ISA_ENV, ISAS, choose_isa, requested_isa


def test_requested_isa_reads_the_setting(monkeypatch):
    monkeypatch.delenv(ISA_ENV, raising=False)
    assert requested_isa() is None
    for value, want in (("avx2", "avx2"), (" AVX512 ", "avx512"), ("portable", "portable"),
                        ("avx512_bf16", "avx512_bf16"), ("auto", None), ("", None)):
        monkeypatch.setenv(ISA_ENV, value)
        assert requested_isa() == want
    assert requested_isa("avx2") == "avx2"  # an explicit value wins over the environment


def test_unknown_isa_names_the_setting_and_the_valid_values():
    with pytest.raises(CpuIsaError,
                       match=f"{ISA_ENV}='sse9'.*avx512_bf16, avx512, avx2, portable"):
        requested_isa("sse9")


def test_choose_best_or_forced_below_best():
    assert choose_isa(None, ISAS) == "avx512_bf16"
    assert choose_isa(None, ISAS[1:]) == "avx512"  # AVX-512 without AVX512-BF16
    assert choose_isa("avx512", ISAS) == "avx512"  # the bf16 dot product's fallback, forced
    assert choose_isa("avx2", ISAS) == "avx2"
    assert choose_isa("portable", ISAS) == "portable"
    assert choose_isa(None, ["avx2", "portable"]) == "avx2"  # a CPU without AVX-512


def test_unsupported_isa_is_an_error_naming_what_the_cpu_has():
    with pytest.raises(CpuIsaError, match=r"avx512: this CPU \(.*\) supports only avx2, "
                                          "portable"):
        choose_isa("avx512", ["avx2", "portable"])


@pytest.fixture
def fresh_backend(monkeypatch, cpu_ops):
    """get_backend builds anew (reading the environment); the best path afterwards."""
    clear_cache()
    yield monkeypatch
    monkeypatch.delenv(ISA_ENV, raising=False)
    clear_cache()
    get_backend("sparse_cpu", fallback=False)


def test_cpu_reports_its_paths_best_first(cpu_ops):
    supported = cpu_ops.supported_isas()
    assert supported[-1] == "portable"
    assert supported == [isa for isa in ISAS if isa in supported]


@pytest.mark.parametrize("isa", ISAS)
def test_environment_forces_a_path(fresh_backend, cpu_ops, isa):
    if isa not in cpu_ops.supported_isas():
        pytest.skip(f"this CPU cannot run the {isa} path")
    fresh_backend.setenv(ISA_ENV, isa)
    assert get_backend("sparse_cpu", fallback=False).isa == isa
    fresh_backend.delenv(ISA_ENV)
    clear_cache()
    assert get_backend("sparse_cpu", fallback=False).isa == cpu_ops.supported_isas()[0]


def test_bad_setting_raises_instead_of_falling_back(fresh_backend):
    fresh_backend.setenv(ISA_ENV, "avx1024")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning either
        with pytest.raises(CpuIsaError, match="avx1024"):
            get_backend("sparse_cpu")


def test_select_isa_refuses_what_the_cpu_lacks(cpu_ops, monkeypatch):
    monkeypatch.setattr(type(cpu_ops), "supported_isas", staticmethod(lambda: ["portable"]))
    before = cpu_ops.isa
    with pytest.raises(CpuIsaError, match="supports only portable"):
        cpu_ops.select_isa("avx2")
    assert cpu_ops.isa == before


def test_swiglu_exp_edges(cpu_ops, isa):
    """SiLU through the vector exp: overflow to inf, underflow to 0, large and tiny gates."""
    g = torch.tensor([-1e4, -100.0, -88.5, -87.0, -20.0, -1e-3, 0.0, 1e-3, 0.5, 20.0, 88.5,
                      100.0, 1e4, -3.0, 3.0, 7.0, -7.0])
    y = torch.cat([g, torch.full_like(g, 1.5)]).view(1, -1)
    h = torch.ops.powerbench_cpu.gated_activation(y, 2)
    ref = torch.nn.functional.silu(g.double()) * 1.5
    torch.testing.assert_close(h[0].double(), ref, rtol=3e-7, atol=1e-30)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_paths_round_16_bit_outputs_identically(cpu_ops, gen, dtype):
    """The dense kernel's fp16/bf16 output is converted in registers on the vector paths and
    in C++ on the portable one: every path gives the same bits, ties and overflow
    included (x * 1 = w exactly, so each output is one weight converted back)."""
    w = torch.randn(300, 1, generator=gen) * torch.logspace(-9, 5, 300).view(-1, 1)
    w = torch.cat([w, torch.tensor([[65504.0], [65519.0], [65520.0], [1e9], [float("nan")],
                                    [float("inf")], [-float("inf")], [2.0 ** -25]])])
    x = torch.ones(1, 1, dtype=dtype)
    outs = {}
    for isa in cpu_ops.supported_isas():
        cpu_ops.select_isa(isa)
        outs[isa] = cpu_ops.prepare_linear()(x, w, None)
    cpu_ops.select_isa(None)
    want = w.t().to(dtype)
    bits = {isa: out.view(torch.int16) for isa, out in outs.items()}
    number = ~want.isnan()
    for isa, out in outs.items():
        assert torch.equal(bits[isa], bits["portable"]), isa  # NaN payloads included
        assert torch.equal(bits[isa][number], want.view(torch.int16)[number]), isa
        assert out[~number].isnan().all()


def has_cpu_flag(flag: str) -> bool:
    try:
        with open("/proc/cpuinfo") as fh:
            return any(line.startswith("flags") and flag in line.split() for line in fh)
    except OSError:
        return False


def test_bf16_dot_path_offered_exactly_where_the_cpu_has_it(cpu_ops):
    if not has_cpu_flag("avx512f"):
        pytest.skip("no /proc/cpuinfo AVX-512 flags to compare with")
    assert ("avx512_bf16" in cpu_ops.supported_isas()) == has_cpu_flag("avx512_bf16")


# (d_ffn, d_model), batch: K below, at and above multiples of the 32 bf16 lanes, batches
# below, at and above the 4-token tile, ids unsorted
BF16_CASES = (((37, 31), 2), ((37, 32), 3), ((70, 97), 8), ((300, 257), 5), ((129, 1024), 13))


@pytest.mark.parametrize("x_kind", ["bf16", "fp32", "subnormal"])
def test_bf16_batched_rows_on_every_path_match_float64(cpu_ops, isa, gen, x_kind):
    """bf16 rows against several tokens: with bf16-exact inputs the avx512_bf16 path takes
    the vdpbf16ps kernel; fp32 inputs (not exact in bf16) and inputs with a subnormal take
    the convert-and-FMA kernel there; every path within fp32 rounding of float64."""
    for (n, k), batch in BF16_CASES:
        w = (torch.randn(n, k, generator=gen) * 0.1).to(torch.bfloat16)
        x = torch.randn(batch, k, generator=gen)
        if x_kind == "bf16":
            x = x.to(torch.bfloat16)
        elif x_kind == "subnormal":
            x = x.to(torch.bfloat16).float()
            x[0, 0] = 1e-40  # exact in bf16, but vdpbf16ps would read it as zero
        idx = torch.randperm(n, generator=gen)[: (2 * n) // 3]
        out = cpu_ops.row(w, x, idx)
        want = x.double() @ w.double()[idx].t()
        scale = x.double().abs() @ w.double()[idx].abs().t()
        tol = (4e-3 if x_kind == "bf16" else 1e-5) * scale + 1e-6  # bf16 output rounding
        assert ((out.double() - want).abs() <= tol).all(), (isa, n, k, batch)
        gated = cpu_ops.ffn_gated(x, w, w, w, idx, "reglu")
        g = (x.double() @ w.double()[idx].t()).clamp(min=0)
        ref_gated = (g * (x.double() @ w.double()[idx].t())) @ w.double()[idx]
        gscale = (scale * scale) @ w.double()[idx].abs()
        gtol = (4e-3 if x_kind == "bf16" else 1e-4) * gscale + 1e-5
        assert ((gated.double() - ref_gated).abs() <= gtol).all(), (isa, n, k, batch)


@pytest.mark.parametrize("c_kind", ["bf16", "fp32", "subnormal"])
def test_bf16_batched_axpy_on_every_path_matches_float64(cpu_ops, isa, gen, c_kind):
    """bf16 axpy rows for several tokens: with bf16-exact coefficients the avx512_bf16 path
    pairs rows for vdpbf16ps (an odd row out, D below, at and above multiples of 32 and
    of the 256-column chunk); fp32 coefficients and a subnormal one take convert-and-FMA
    there; every path within fp32 rounding of float64."""
    for (n, d), batch in BF16_CASES:
        w_t = (torch.randn(n, d, generator=gen) * 0.1).to(torch.bfloat16)
        c = torch.randn(batch, n, generator=gen)
        if c_kind != "fp32":
            c = c.to(torch.bfloat16).float()
        c[:, 1] = 0.0  # a neuron no token needs
        idx = torch.randperm(n, generator=gen)[: (2 * n) // 3 + 1]
        if c_kind == "subnormal":  # exact in bf16, but vdpbf16ps would read it as zero:
            c[0] = 0.0  # token 0 is that coefficient times a row large enough to show it
            c[0, 0] = 1e-40
            w_t[idx[0]] *= 1e30
        coeffs = c[:, : idx.numel()].contiguous()
        out = cpu_ops.axpy(w_t, coeffs, idx)
        rows = w_t.double()[idx]
        want = coeffs.double() @ rows
        tol = 1e-5 * (coeffs.double().abs() @ rows.abs()) + 1e-30
        assert ((out.double() - want).abs() <= tol).all(), (isa, n, d, batch)
