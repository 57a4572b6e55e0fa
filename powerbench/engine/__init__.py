"""Inference engines: our decoder loop (dense FFN now, sparse FFNs plug in) and the
`transformers.generate` baseline, both timed the same way (see `timing`).

Its names need torch (+ transformers for model weights / the baseline) only, and load on
first use: the config schema (`engine.config`) imports without torch.
"""

from powerbench.build import lazy_attributes

_LAZY = {
    "Engine": "powerbench.engine.base",
    "EngineResult": "powerbench.engine.base",
    "Decoder": "powerbench.engine.decoder",
    "Generation": "powerbench.engine.decoder",
    "DecoderEngine": "powerbench.engine.decoder_engine",
    "FFN": "powerbench.engine.ffn",
    "DenseFFN": "powerbench.engine.ffn",
    "FFNObserver": "powerbench.engine.ffn",
    "HFGenerateEngine": "powerbench.engine.hf_generate",
    "KVCache": "powerbench.engine.kv_cache",
    "ActivationRecorder": "powerbench.engine.observers",
    "build_prompt_batch": "powerbench.engine.prompts",
    "build_engine": "powerbench.engine.runner",
    "run_engine": "powerbench.engine.runner",
    "Sampler": "powerbench.engine.sampling",
    "SamplingConfig": "powerbench.engine.sampling",
    "METRIC_NAMES": "powerbench.engine.timing",
    "RunTiming": "powerbench.engine.timing",
    "StepClock": "powerbench.engine.timing",
    "DecoderWeights": "powerbench.engine.weights",
    "extract_weights": "powerbench.engine.weights",
}

__getattr__ = lazy_attributes(__name__, _LAZY)

__all__ = [
    "METRIC_NAMES",
    "ActivationRecorder",
    "Decoder",
    "DecoderEngine",
    "DecoderWeights",
    "DenseFFN",
    "Engine",
    "EngineResult",
    "FFN",
    "FFNObserver",
    "Generation",
    "HFGenerateEngine",
    "KVCache",
    "RunTiming",
    "Sampler",
    "SamplingConfig",
    "StepClock",
    "build_engine",
    "build_prompt_batch",
    "extract_weights",
    "run_engine",
]
