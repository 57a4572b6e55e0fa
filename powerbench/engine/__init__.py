"""Inference engines: our decoder loop (dense FFN now, sparse FFNs plug in) and the
`transformers.generate` baseline, both timed the same way (see `timing`).

Imports need torch (+ transformers for model weights / the baseline) only.
"""

from powerbench.engine.base import Engine, EngineResult
from powerbench.engine.decoder import Decoder, Generation
from powerbench.engine.decoder_engine import DecoderEngine
from powerbench.engine.ffn import FFN, DenseFFN, FFNObserver
from powerbench.engine.hf_generate import HFGenerateEngine
from powerbench.engine.kv_cache import KVCache
from powerbench.engine.observers import ActivationRecorder
from powerbench.engine.prompts import build_prompt_batch
from powerbench.engine.run_engine import build_engine, run_engine
from powerbench.engine.sampling import Sampler, SamplingConfig
from powerbench.engine.timing import METRIC_NAMES, RunTiming, StepClock
from powerbench.engine.weights import DecoderWeights, extract_weights

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
