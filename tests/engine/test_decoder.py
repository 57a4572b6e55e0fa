"""Our decoder against transformers: logits, greedy tokens, cache, padding, sampling."""

from __future__ import annotations

import pytest
import torch

from powerbench.engine import ActivationRecorder, Decoder, SamplingConfig, extract_weights

from .conftest import MODEL_KINDS, VOCAB

ATOL = RTOL = 1e-4


def _prompt(batch: int, length: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, VOCAB, (batch, length), generator=g)


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("kind", MODEL_KINDS)
def test_logits_match_hf_prefill_and_every_decode_step(models, kind, batch):
    model = models[kind]
    decoder = Decoder(extract_weights(model))
    ids = _prompt(batch, 11)
    with torch.inference_mode():
        ref = model(ids, use_cache=True)
        cache = decoder.new_cache(batch, 11 + 6)
        ours = decoder.forward(ids, cache)
        torch.testing.assert_close(ours, ref.logits, atol=ATOL, rtol=RTOL)
        past = ref.past_key_values
        for _ in range(6):
            nxt = ref.logits[:, -1:].argmax(-1)
            ref = model(nxt, past_key_values=past, use_cache=True)
            past = ref.past_key_values
            ours = decoder.forward(nxt, cache)
            torch.testing.assert_close(ours, ref.logits, atol=ATOL, rtol=RTOL)
    assert cache.length == 17


@pytest.mark.parametrize("kind", ["opt", "llama_relu_gqa"])
def test_greedy_tokens_equal_hf_generate(models, kind):
    model = models[kind]
    decoder = Decoder(extract_weights(model))
    ids = _prompt(2, 9, seed=1)
    n = 12
    with torch.inference_mode():
        ref = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=n, min_new_tokens=n,
                             pad_token_id=model.config.pad_token_id)
    ours = decoder.generate(ids, n, SamplingConfig(suppress_ids=(model.config.eos_token_id,)))
    assert ours.tokens.shape == (2, n)
    assert torch.equal(ours.tokens, ref[:, 9:])
    assert len(set(ours.tokens.flatten().tolist())) > 1  # not a degenerate constant output


@pytest.mark.parametrize("kind", ["opt", "llama_relu_gqa"])
def test_cached_decode_equals_full_recompute(models, kind):
    decoder = Decoder(extract_weights(models[kind]))
    ids = _prompt(2, 7, seed=2)
    gen = decoder.generate(ids, 6, return_logits=True)
    assert gen.logits is not None
    with torch.inference_mode():
        for t in range(6):
            seq = torch.cat([ids, gen.tokens[:, :t]], dim=1)
            fresh = decoder.forward(seq, decoder.new_cache(2, seq.shape[1]))[:, -1]
            torch.testing.assert_close(gen.logits[:, t], fresh, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("kind", ["opt_postln_proj", "llama_relu_gqa"])
def test_chunked_prefill_equals_one_shot(models, kind):
    decoder = Decoder(extract_weights(models[kind]))
    ids = _prompt(2, 12, seed=3)
    with torch.inference_mode():
        whole = decoder.forward(ids, decoder.new_cache(2, 12))
        cache = decoder.new_cache(2, 12)
        first = decoder.forward(ids[:, :5], cache)
        second = decoder.forward(ids[:, 5:], cache)
    torch.testing.assert_close(torch.cat([first, second], 1), whole, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("kind", ["opt", "llama_relu_gqa"])
def test_left_padded_batch_equals_rows_run_alone(models, kind):
    decoder = Decoder(extract_weights(models[kind]))
    long, short = _prompt(1, 10, seed=4), _prompt(1, 6, seed=5)
    pad = torch.zeros(1, 4, dtype=torch.long)
    ids = torch.cat([long, torch.cat([pad, short], 1)], 0)
    mask = torch.ones_like(ids)
    mask[1, :4] = 0
    batch = decoder.generate(ids, 5, attention_mask=mask, return_logits=True)
    for row, alone_ids in enumerate((long, short)):
        alone = decoder.generate(alone_ids, 5, return_logits=True)
        assert torch.equal(batch.tokens[row], alone.tokens[0])
        torch.testing.assert_close(batch.logits[row], alone.logits[0], atol=ATOL, rtol=RTOL)


def test_sampling_is_reproducible_with_a_seed(models):
    decoder = Decoder(extract_weights(models["llama_relu_gqa"]))
    ids = _prompt(2, 6, seed=6)
    cfg = SamplingConfig(greedy=False, temperature=1.5, top_k=50, top_p=0.95, seed=7)
    a = decoder.generate(ids, 16, cfg).tokens
    b = decoder.generate(ids, 16, cfg).tokens
    c = decoder.generate(ids, 16, SamplingConfig(greedy=False, temperature=1.5, top_k=50,
                                                 top_p=0.95, seed=8)).tokens
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    greedy = decoder.generate(ids, 16).tokens
    top1 = decoder.generate(ids, 16, SamplingConfig(greedy=False, top_k=1, seed=9)).tokens
    assert torch.equal(top1, greedy)


def test_observer_counts_match_hf_fc1_activations(models):
    model = models["opt"]
    captured: dict[int, torch.Tensor] = {}
    hooks = [layer.fc1.register_forward_hook(
        lambda _m, _i, out, i=i: captured.__setitem__(i, out.reshape(-1, out.shape[-1])))
        for i, layer in enumerate(model.model.decoder.layers)]
    ids = _prompt(2, 8, seed=10)
    try:
        with torch.inference_mode():
            model(ids)
    finally:
        for h in hooks:
            h.remove()
    recorder = ActivationRecorder(n_layers=2, keep_inputs=True)
    decoder = Decoder(extract_weights(model), observer=recorder)
    with torch.inference_mode():
        decoder.forward(ids, decoder.new_cache(2, 8))
    for i in range(2):
        expected = (torch.relu(captured[i]) > 0).sum(0)
        assert torch.equal(recorder.counts[i], expected)
        assert recorder.n_tokens[i] == 16
        assert recorder.inputs(i).shape == (16, 64)
    frac = recorder.mean_active_fraction()
    assert 0.0 < frac < 1.0


def test_kv_cache_overflow_raises(models):
    decoder = Decoder(extract_weights(models["opt"]))
    cache = decoder.new_cache(1, 4)
    with torch.inference_mode(), pytest.raises(ValueError, match="cache full"):
        decoder.forward(_prompt(1, 5), cache)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("kind", MODEL_KINDS)
def test_dense_kernel_sparse_cpu_matches_torch_linear(models, kind, dtype):
    """engine.dense_kernel: the sparse_cpu matrix-vector kernel (decode steps) gives the
    logits F.linear gives, fp32 and fp16; the prompt (11 rows) runs F.linear in both."""
    from powerbench.engine.linear import kernel_name, make_linear

    weights = extract_weights(models[kind], dtype=dtype)
    ours = Decoder(weights, linear=make_linear("sparse_cpu", weights.device, max_rows=8))
    ref = Decoder(weights, linear=make_linear("torch"))
    assert kernel_name(ours.linear) == "sparse_cpu" and kernel_name(ref.linear) == "torch"
    ids = _prompt(2, 11)
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    with torch.inference_mode():
        caches = ours.new_cache(2, 16), ref.new_cache(2, 16)
        torch.testing.assert_close(ours.forward(ids, caches[0]), ref.forward(ids, caches[1]))
        nxt = ids[:, -1:]
        for _ in range(4):
            a, b = ours.forward(nxt, caches[0]), ref.forward(nxt, caches[1])
            torch.testing.assert_close(a.float(), b.float(), atol=tol, rtol=tol)
            nxt = b[:, -1:].argmax(-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("kind", ["opt", "llama_relu_gqa"])
def test_fused_decode_kernels_equal_the_torch_chain(models, kind, dtype):
    """The fused RMSNorm / decode-attention operators (the default on the CPU) give the
    torch chain's tokens and, to fp rounding, its logits, through a growing cache."""
    w = extract_weights(models[kind], dtype=dtype)
    fused, plain = Decoder(w), Decoder(w, fused=False)
    assert fused.kernels is not None and plain.kernels is None
    ids = _prompt(2, 9, seed=4)
    a = fused.generate(ids, 8, return_logits=True)
    b = plain.generate(ids, 8, return_logits=True)
    assert torch.equal(a.tokens, b.tokens)
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(a.logits, b.logits, atol=tol, rtol=tol)
