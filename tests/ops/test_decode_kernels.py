"""The fused decode-step operators (RMSNorm, attention after Q/K/V, gated activation) against
the torch chain the decoder runs without them, on every ISA path this CPU supports."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from powerbench.engine.decode_kernels import DecodeKernels, decode_kernels
from powerbench.engine.functional import apply_rope, rms_norm
from powerbench.engine.weights import NormWeights

TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float16: dict(atol=2e-3, rtol=2e-3),
       torch.bfloat16: dict(atol=2e-2, rtol=2e-2)}


@pytest.fixture(scope="module")
def kernels(cpu_ops) -> DecodeKernels:  # cpu_ops: the extension is built
    k = decode_kernels("cpu")
    assert k is not None
    return k


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("affine", [True, False])
def test_rms_norm_matches_the_torch_chain(kernels, isa, gen, dtype, affine):
    x = (torch.randn(3, 1, 100, generator=gen) * 3).to(dtype)  # 100: a scalar tail
    w = NormWeights("rms", torch.rand(100, generator=gen).to(dtype) + 0.5 if affine else None,
                    None, 1e-5)
    ours = kernels.rms_norm(x, w)
    ref = rms_norm(x, w)
    assert ours is not None and ours.dtype == dtype and ours.shape == x.shape
    torch.testing.assert_close(ours, ref, **TOL[dtype])
    if dtype != torch.float32:  # rounded where the torch chain rounds: at most one ulp apart
        ulp = torch.finfo(dtype).eps * ref.float().abs().clamp_min(1e-3)
        assert ((ours.float() - ref.float()).abs() <= ulp * 1.01).all()


def test_rms_norm_declines_what_it_does_not_cover(kernels, gen):
    x = torch.randn(2, 8, generator=gen)
    assert kernels.rms_norm(x, NormWeights("layer", torch.ones(8), torch.zeros(8), 1e-5)) is None
    assert kernels.rms_norm(x.t().contiguous().t(), NormWeights("rms", None, None, 1e-5)) is None
    assert kernels.rms_norm(x, NormWeights("rms", torch.ones(8, dtype=torch.float16), None,
                                           1e-5)) is None


def _reference(qkv, cos, sin, k_cache, v_cache, pos, heads, scale):
    """The decoder's torch chain: rotary on Q and K, cache write, SDPA over 0..pos."""
    bsz, kv, _, hd = k_cache.shape
    y = qkv.view(bsz, 1, heads + 2 * kv, hd)
    qk = y[:, :, :heads + kv].transpose(1, 2)
    if cos is not None:
        qk = apply_rope(qk, cos.view(bsz, 1, 1, hd), sin.view(bsz, 1, 1, hd))
    q, k = qk[:, :heads], qk[:, heads:]
    v = y[:, :, heads + kv:].transpose(1, 2)
    k_cache[:, :, pos:pos + 1] = k
    v_cache[:, :, pos:pos + 1] = v
    out = F.scaled_dot_product_attention(q, k_cache[:, :, :pos + 1], v_cache[:, :, :pos + 1],
                                         scale=scale, enable_gqa=kv != heads)
    return out.transpose(1, 2).reshape(bsz, 1, heads * hd)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("heads,kv,hd,rope", [(4, 4, 16, False), (6, 2, 12, True),
                                              (8, 1, 64, True), (3, 3, 20, True),
                                              (4, 2, 80, True)])
@pytest.mark.parametrize("pos", [0, 37])
def test_decode_attention_matches_the_torch_chain(kernels, isa, gen, dtype, heads, kv, hd,
                                                   rope, pos):
    bsz, max_len, scale = 2, 48, hd ** -0.5
    qkv = torch.randn(bsz, 1, (heads + 2 * kv) * hd, generator=gen).to(dtype)
    cache = torch.randn(2, bsz, kv, max_len, hd, generator=gen).to(dtype)
    cos = sin = None
    if rope:
        angle = torch.rand(bsz, hd // 2, generator=gen) * 6
        cos, sin = (torch.cat([f(angle)] * 2, -1).to(dtype) for f in (torch.cos, torch.sin))
    k_ref, v_ref = cache[0].clone(), cache[1].clone()
    k_ours, v_ours = cache[0].clone(), cache[1].clone()
    ref = _reference(qkv, cos, sin, k_ref, v_ref, pos, heads, scale)
    ours = kernels.attention_op(qkv, cos, sin, k_ours, v_ours, pos, heads, scale)
    assert ours.dtype == dtype and ours.shape == (bsz, 1, heads * hd)
    torch.testing.assert_close(ours, ref, **TOL[dtype])
    # the new K: rounded to 16 bits where torch rounds (exact); fp32 to the order of a sum
    exact = dict(atol=0, rtol=0) if dtype != torch.float32 else dict(atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(k_ours, k_ref, **exact)
    torch.testing.assert_close(v_ours, v_ref, atol=0, rtol=0)


def test_decode_attention_spans_threads(kernels, isa, gen):
    """A long cache: the (row, head) pairs are split across the pool's workers."""
    from powerbench.threads import torch_threads

    heads, kv, hd, pos = 16, 4, 64, 500
    qkv = torch.randn(2, 1, (heads + 2 * kv) * hd, generator=gen)
    k, v = torch.randn(2, 2, kv, 512, hd, generator=gen)
    with torch_threads(2):
        ours = kernels.attention_op(qkv, None, None, k.clone(), v.clone(), pos, heads, 0.125)
    ref = _reference(qkv, None, None, k.clone(), v.clone(), pos, heads, 0.125)
    torch.testing.assert_close(ours, ref, atol=1e-5, rtol=1e-5)


def test_decode_attention_argument_errors(kernels):
    qkv = torch.zeros(1, 1, 6 * 8)
    k = v = torch.zeros(1, 2, 4, 8)
    with pytest.raises(ValueError, match="multiple"):
        kernels.attention_op(qkv, None, None, k, v, 0, 3, 1.0)
    with pytest.raises(IndexError, match="outside the cache"):
        kernels.attention_op(qkv, None, None, k, v, 4, 2, 1.0)
    with pytest.raises(TypeError, match="like x"):
        kernels.attention_op(qkv, None, None, k.half(), v, 0, 2, 1.0)
    with pytest.raises(ValueError, match="both cos and sin"):
        kernels.attention_op(qkv, torch.zeros(1, 8), None, k, v, 0, 2, 1.0)
    with pytest.raises(ValueError, match=r"qkv must be \[1, 1, 48\]"):
        kernels.attention_op(torch.zeros(1, 1, 40), None, None, k, v, 0, 2, 1.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("kind", ["reglu", "drelu", "swiglu"])
def test_gated_activation_matches_the_torch_chain(kernels, isa, gen, dtype, kind):
    from powerbench.engine.ffn import _GATES
    from powerbench.model.spec import FFNKind

    y = (torch.randn(3, 2 * 101, generator=gen) * 3).to(dtype)
    ours = kernels.gated(y, FFNKind(kind))
    ref = _GATES[FFNKind(kind)](*y.chunk(2, dim=-1))
    assert ours is not None and ours.dtype == dtype and ours.shape == (3, 101)
    torch.testing.assert_close(ours, ref, **TOL[dtype])
    if kind != "swiglu":  # relu is exact: the one rounding is the product's, as in torch
        assert torch.equal(ours, ref)
    assert kernels.gated(y, FFNKind.relu) is None  # not a gated kind: the caller's chain
