"""Inference engines: our decoder loop (dense FFN now, sparse FFNs plug in) and the
`transformers.generate` baseline, both timed the same way (see `timing`).

Imports need torch (+ transformers for model weights / the baseline) only. The names
below load on first use, so that a torch-free submodule (`llamacpp`, whose worker
process must never import torch) imports without them.
"""

from powerbench.build import lazy_attributes

_NAMES = {
    "Engine": "base", "EngineResult": "base", "Decoder": "decoder", "Generation": "decoder",
    "DecoderEngine": "decoder_engine", "FFN": "ffn", "DenseFFN": "ffn", "FFNObserver": "ffn",
    "HFGenerateEngine": "hf_generate", "KVCache": "kv_cache",
    "ActivationRecorder": "observers", "build_prompt_batch": "prompts",
    "build_engine": "run_engine", "run_engine": "run_engine", "Sampler": "sampling",
    "SamplingConfig": "sampling", "METRIC_NAMES": "timing", "RunTiming": "timing",
    "StepClock": "timing", "DecoderWeights": "weights", "extract_weights": "weights",
}
__getattr__ = lazy_attributes(__name__, {k: f"{__name__}.{v}" for k, v in _NAMES.items()})

__all__ = sorted(_NAMES)
