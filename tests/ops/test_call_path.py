"""The compiled CPU backend's per-token calls go to the extension module's own functions
(pybind11), not through the torch dispatcher (torch.ops.powerbench_cpu.*, whose cold path
cost 26-45 us per call on the 2-core host): the profiler, which records every dispatcher
op, sees none of them; the results and error types are those of the registered ops."""

from __future__ import annotations

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from powerbench.engine.decode_kernels import decode_kernels
from powerbench.engine.weights import NormWeights
from powerbench.model.spec import FFNKind


def dispatched(fn) -> list[str]:
    """The powerbench_cpu ops the torch dispatcher ran during fn()."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return [e.name for e in prof.events() if e.name.startswith("powerbench_cpu::")]


def test_operator_calls_skip_the_dispatcher_and_match_the_registered_ops(cpu_ops):
    torch.manual_seed(0)
    w, wt = torch.randn(64, 32).half(), torch.randn(64, 32).half()
    x, idx = torch.randn(2, 32), torch.arange(0, 64, 3)
    c = torch.rand(2, idx.numel())
    b1, b2 = torch.randn(64), torch.randn(32)
    calls = {
        "row": (lambda: cpu_ops.row(w, x, idx, check=True),
                lambda: torch.ops.powerbench_cpu.row(w, x, idx, None, False, False, True)),
        "axpy": (lambda: cpu_ops.axpy(wt, c, idx, check=True),
                 lambda: torch.ops.powerbench_cpu.axpy(wt, c, idx, None, True)),
        "ffn_relu": (lambda: cpu_ops.ffn_relu(x, w, b1, wt, b2, idx, check=True),
                     lambda: torch.ops.powerbench_cpu.ffn_relu(x, w, b1, wt, b2, idx, True, True)),
        "linear": (lambda: cpu_ops.prepare_linear()(x, w, b1),
                   lambda: torch.ops.powerbench_cpu.linear(x, w, b1)),
    }
    for name, (ours, registered) in calls.items():
        assert dispatched(ours) == [], name
        assert dispatched(registered) == [f"powerbench_cpu::{name}"], name
        torch.testing.assert_close(ours(), registered(), rtol=0, atol=0, msg=name)
    with pytest.raises(IndexError, match="out of range"):  # the C++ error types survive
        cpu_ops.row(w, x, torch.tensor([64]), check=True)


def test_fused_decode_operators_skip_the_dispatcher(cpu_ops):
    kernels = decode_kernels("cpu")
    assert kernels is not None
    x = torch.randn(1, 1, 32).half()
    norm = NormWeights(kind="rms", weight=torch.rand(32).half(), bias=None, eps=1e-6)
    gate_up = torch.randn(1, 1, 64).half()
    out = []
    assert dispatched(lambda: out.extend((kernels.rms_norm(x, norm),
                                          kernels.gated(gate_up, FFNKind.swiglu)))) == []
    assert [tuple(t.shape) for t in out] == [(1, 1, 32), (1, 1, 32)]  # both ran fused


def test_results_are_allocated_without_the_dispatcher_and_follow_inference_mode(cpu_ops):
    """The operators allocate their results with at::detail::empty_cpu, not at::empty (a
    cold dispatcher round trip): the profiler sees no ATen op at all, and the result is the
    tensor at::empty would give, an inference tensor exactly under inference mode."""
    torch.manual_seed(0)
    w, wt = torch.randn(64, 32).half(), torch.randn(64, 32).half()
    x, idx = torch.randn(1, 32).half(), torch.arange(0, 64, 3)
    c = torch.rand(1, idx.numel()).half()
    calls = {"row": lambda: cpu_ops.row(w, x, idx, check=False),
             "axpy": lambda: cpu_ops.axpy(wt, c, idx, check=False),
             "linear": lambda: cpu_ops.prepare_linear()(x, w, None)}
    for name, call in calls.items():
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            y = call()
        assert [e.name for e in prof.events() if e.name.startswith("aten::")] == [], name
        assert y.dtype == torch.float16 and not y.requires_grad and not y.is_inference(), name
        with torch.inference_mode():
            assert call().is_inference(), name


def test_out_is_written_in_place_without_any_aten_op(cpu_ops):
    """With out=, sparse_cpu's public calls and its linear write the caller's tensor in place:
    no ATen op at all (a copy into out would show as aten::copy_), the same tensor back."""
    torch.manual_seed(0)
    w, wt = torch.randn(64, 32).half(), torch.randn(64, 32).half()
    x, idx = torch.randn(1, 32).half(), torch.arange(0, 64, 3)
    c, b1, b2 = torch.rand(1, idx.numel()).half(), torch.randn(64), torch.randn(32)
    calls = {"row": lambda out: cpu_ops.row(w, x, idx, check=False, out=out),
             "axpy": lambda out: cpu_ops.axpy(wt, c, idx, check=False, out=out),
             "ffn_relu": lambda out: cpu_ops.ffn_relu(x, w, b1, wt, b2, idx, check=False,
                                                      out=out),
             "ffn_gated": lambda out: cpu_ops.ffn_gated(x, w, w, wt, idx, check=False, out=out),
             "linear": lambda out: cpu_ops.linear(x, w, b1, out=out)}
    for name, call in calls.items():
        out = torch.empty_like(call(None))
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            y = call(out)
        assert [e.name for e in prof.events() if e.name.startswith("aten::")] == [], name
        assert y is out, name
