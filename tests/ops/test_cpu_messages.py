"""The compiled CPU ops' own argument errors, word for word: their numbers, shapes and dtypes
are formatted with std::to_string (ostream number formatting inside an extension segfaulted
on another toolchain), and must read as c10's formatting did."""

from __future__ import annotations

import re

import pytest
import torch

OPS = torch.ops.powerbench_cpu


@pytest.fixture
def cpu(cpu_ops):  # cpu_ops: the extension is built and loaded
    return cpu_ops


def raises(kind: type[Exception], message: str):
    return pytest.raises(kind, match="^" + re.escape(message))


def test_active_set_messages(cpu):
    w, x = torch.zeros(20, 8), torch.zeros(2, 8)
    with raises(IndexError, "idx[1] = 20 is out of range for 20 neurons"):
        cpu.row(w, x, torch.tensor([0, 20]))
    with raises(IndexError, "idx[0] = -1 is out of range for 20 neurons"):
        cpu.row(w, x, torch.tensor([-1, 3]))
    with raises(ValueError, "idx holds neuron 3 twice (again at position 2); the active set "
                            "must not repeat neurons"):
        cpu.row(w, x, torch.tensor([3, 7, 3], dtype=torch.int32))
    with raises(TypeError, "idx must be int32 or int64, got Float"):
        cpu.row(w, x, torch.tensor([1.0]))
    with raises(ValueError, "idx must be 1-D, got 2-D"):
        cpu.row(w, x, torch.tensor([[1, 2]]))


def test_weight_and_input_messages(cpu):
    w, x, idx = torch.zeros(20, 8), torch.zeros(2, 8), torch.tensor([1, 2])
    with raises(TypeError, "w must be float32, float16 or bfloat16, got Double"):
        cpu.row(w.double(), x, idx)
    with raises(ValueError, "w must be 2-D [neurons, features], got 3-D"):
        cpu.row(torch.zeros(2, 20, 8), x, idx)
    with raises(ValueError, "x must be [batch >= 1, 8] or [8], got [2, 9]"):
        cpu.row(w, torch.zeros(2, 9), idx)
    with raises(ValueError, "w2_t has shape [20, 4], expected [20, 8] like w1 (both "
                            "[d_ffn, d_model])"):
        cpu.ffn_relu(x, w, None, w[:, :4].contiguous(), None, idx)
    with raises(TypeError, "w2_t is Half but w1 is Float"):
        cpu.ffn_relu(x, w, None, w.half(), None, idx)
    with raises(ValueError, "b1 must have shape (20,), got [3]"):
        cpu.ffn_relu(x, w, torch.zeros(3), w, None, idx)
    with raises(ValueError, "unknown gated kind 5"):
        OPS.ffn_gated(x, w, w, w, idx, 5, True, True)
    with raises(ValueError, "x must be [..., 8], got [2, 9]"):
        cpu.prepare_linear()(torch.zeros(2, 9), w, None)
    with raises(ValueError, "bias must have shape [20]"):
        cpu.prepare_linear()(x, w, torch.zeros(3))


def test_decode_and_knob_messages(cpu):
    qkv, k = torch.zeros(1, 1, 6 * 8), torch.zeros(1, 2, 4, 8)
    attention = OPS.decode_attention
    with raises(ValueError, "n_heads (3) must be a multiple of the cache's 2 KV heads"):
        attention(qkv, None, None, k, k, 0, 3, 1.0)
    with raises(IndexError, "position 4 is outside the cache (4)"):
        attention(qkv, None, None, k, k, 4, 2, 1.0)
    with raises(ValueError, "qkv must be [1, 1, 48], got [1, 1, 40]"):
        attention(torch.zeros(1, 1, 40), None, None, k, k, 0, 2, 1.0)
    with raises(TypeError, "k_cache must be Float like x, got Half"):
        attention(qkv, None, None, k.half(), k, 0, 2, 1.0)
    specs = cpu.knob_specs()
    with raises(ValueError, f"set_cpu_knobs needs {len(specs)} values, got 2"):
        OPS.set_cpu_knobs([1, 2])
    values = [s.default for s in specs]
    i = [s.name for s in specs].index("prewake")
    values[i] = 2
    with raises(ValueError, "CPU knob prewake=2 is outside [0, 1]"):
        OPS.set_cpu_knobs(values)
