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
                        ("auto", None), ("", None)):
        monkeypatch.setenv(ISA_ENV, value)
        assert requested_isa() == want
    assert requested_isa("avx2") == "avx2"  # an explicit value wins over the environment


def test_unknown_isa_names_the_setting_and_the_valid_values():
    with pytest.raises(CpuIsaError, match=f"{ISA_ENV}='sse9'.*avx512, avx2, portable"):
        requested_isa("sse9")


def test_choose_best_or_forced_below_best():
    assert choose_isa(None, ISAS) == "avx512"
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
