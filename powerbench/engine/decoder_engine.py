"""`DecoderEngine`: our decoder loop, timed. Dense with `DenseFFN`; sparse with another FFN.

The FFN comes from the engine config's `ffn` node (`_target_` + parameters), built as
`Target(weights=<DecoderWeights>, **params, **accepted_context)`. An FFN may offer
`metrics() -> dict[str, float]` (e.g. active-neuron share, GPU/CPU neuron-load split);
those are merged into the result's metrics after the timed runs; and `rewind()`, called
before every generation (warm-up and timed). An FFN whose signature names `linear` gets the
decoder's dense projection callable (`powerbench.engine.linear`, chosen by the engine's
`dense_kernel`), so its dense path uses the same kernel as attention.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from powerbench.build import instantiate
from powerbench.engine.base import (
    EngineResult,
    SamplingParams,
    eos_token_ids,
    make_result,
    model_device,
    model_dtype,
    torch_dtype,
)
from powerbench.engine.config import DecoderEngineConfig, ffn_node
from powerbench.engine.decoder import Decoder
from powerbench.engine.ffn import FFNObserver
from powerbench.engine.linear import make_linear
from powerbench.engine.timing import RunTiming, StepClock, measure
from powerbench.engine.weights import extract_weights

if TYPE_CHECKING:
    from powerbench.config.schema import BenchConfig
    from powerbench.model.loading import LoadedModel

class DecoderEngine:
    """Built from its typed config (`DecoderEngineConfig`; default: dense, model's dtype)."""

    def __init__(self, cfg: DecoderEngineConfig | None = None) -> None:
        cfg = cfg if cfg is not None else DecoderEngineConfig()
        self.cfg = cfg
        self.name = cfg.name
        self.ffn_cfg = ffn_node(cfg.ffn)
        self.dtype = cfg.dtype
        self.device = cfg.device
        self.sampling = SamplingParams(cfg.temperature, cfg.top_k, cfg.top_p, cfg.seed)

    def build_decoder(self, loaded: LoadedModel, observer: FFNObserver | None = None,
                      **context: Any) -> Decoder:
        model = loaded.model
        if model is None:
            raise ValueError(f"{loaded.spec.name} has no weights (shape-only model)")
        weights = extract_weights(
            model,
            dtype=torch_dtype(self.dtype, model_dtype(model)),
            device=torch.device(self.device) if self.device else model_device(model),
            huge_pages=self.cfg.huge_pages,
        )
        linear = make_linear(self.cfg.dense_kernel, weights.device,
                             self.cfg.dense_kernel_max_rows)
        ffn = instantiate(self.ffn_cfg, context={"loaded": loaded, "linear": linear, **context},
                          weights=weights)
        return Decoder(weights, ffn=ffn, observer=observer, linear=linear)

    def run(self, loaded: LoadedModel, input_ids: Tensor, bench: BenchConfig,
            observer: FFNObserver | None = None, **context: Any) -> EngineResult:
        decoder = self.build_decoder(loaded, observer=observer, **context)
        device = decoder.device
        sampling = self.sampling.config(bench.greedy, eos_token_ids(loaded.model))
        ids = input_ids.to(device)

        rewind = getattr(decoder.ffn, "rewind", None)  # e.g. replayed oracle active sets

        def once() -> tuple[RunTiming, Tensor]:
            if rewind is not None:
                rewind()
            clock = StepClock(device)
            gen = decoder.generate(ids, bench.new_tokens, sampling, clock=clock)
            return clock.timing(), gen.tokens

        with torch.inference_mode():
            runs, tokens = measure(once, bench.warmup, bench.repeats)
        result = make_result(self.name, runs, tokens, loaded.tokenizer, bench,
                             prompt_tokens=ids.shape[1], dtype=decoder.w.dtype, device=device)
        ffn_metrics = getattr(decoder.ffn, "metrics", None)
        if callable(ffn_metrics):
            result.metrics.update(ffn_metrics())
        if getattr(decoder.ffn, "backend", None):  # the backend that ran (after any fallback)
            result.extra["backend"] = decoder.ffn.backend
        return result
