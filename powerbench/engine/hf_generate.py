"""`HFGenerateEngine`: the baseline, `transformers`' own `generate` with its KV cache.

Timing method: a logits processor appended to `generate`'s list stamps the clock each
time it is called, i.e. once per new token, right after that token's forward pass.
Prefill = start of `generate` until the first call (includes `generate`'s own set-up,
which is part of its cost); each later interval is one decode step (the previous
token's selection + bookkeeping + the next forward). One `generate` call thus yields
both prefill and per-step decode times; no separate 1-token run is subtracted.
`min_new_tokens = max_new_tokens = N` keeps EOS from ending rows early.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from powerbench.engine.base import (
    EngineResult,
    SamplingParams,
    eos_token_ids,
    make_result,
    model_device,
    model_dtype,
    torch_dtype,
)
from powerbench.engine.config import HFGenerateConfig
from powerbench.engine.timing import RunTiming, StepClock, measure

if TYPE_CHECKING:
    from powerbench.config.schema import BenchConfig
    from powerbench.model.loading import LoadedModel


def _stamp_processor(clock: StepClock) -> Any:
    from transformers import LogitsProcessor

    class ClockStamp(LogitsProcessor):
        def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
            clock.mark()
            return scores

    return ClockStamp()


class HFGenerateEngine:
    def __init__(self, cfg: HFGenerateConfig | None = None) -> None:
        cfg = cfg if cfg is not None else HFGenerateConfig()
        self.name = cfg.name
        self.dtype = cfg.dtype
        self.device = cfg.device
        self.sampling = SamplingParams(cfg.temperature, cfg.top_k, cfg.top_p, cfg.seed)

    def _model(self, loaded: LoadedModel) -> Any:
        model = loaded.model
        if model is None:
            raise ValueError(f"{loaded.spec.name} has no weights (shape-only model)")
        dtype = torch_dtype(self.dtype, model_dtype(model))
        device = torch.device(self.device) if self.device else model_device(model)
        if dtype != model_dtype(model) or device != model_device(model):
            model = copy.deepcopy(model).to(device=device, dtype=dtype)  # leave the original
        return model.eval()

    def generation_config(self, model: Any, new_tokens: int, greedy: bool) -> Any:
        gc = copy.deepcopy(model.generation_config)
        eos = eos_token_ids(model)
        s = self.sampling
        gc.update(
            max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=not greedy,
            use_cache=True, num_beams=1,
            # greedy: HF's neutral values, so no "sampling flag ignored" warnings
            temperature=1.0 if greedy else s.temperature,
            top_k=None if greedy else s.top_k,
            top_p=1.0 if greedy else s.top_p,
            pad_token_id=gc.pad_token_id if gc.pad_token_id is not None else
            (eos[0] if eos else 0),
        )
        return gc

    def run(self, loaded: LoadedModel, input_ids: Tensor, bench: BenchConfig,
            **_context: Any) -> EngineResult:
        from transformers import LogitsProcessorList

        model = self._model(loaded)
        device = model_device(model)
        ids = input_ids.to(device)
        mask = torch.ones_like(ids)
        gc = self.generation_config(model, bench.new_tokens, bench.greedy)

        def once() -> tuple[RunTiming, Tensor]:
            clock = StepClock(device)
            processors = LogitsProcessorList([_stamp_processor(clock)])
            if not bench.greedy:
                torch.manual_seed(self.sampling.seed)
            clock.start()
            out = model.generate(ids, attention_mask=mask, generation_config=gc,
                                 logits_processor=processors)
            new = out[:, ids.shape[1]:]
            if new.shape[1] != bench.new_tokens:
                raise RuntimeError(f"generate returned {new.shape[1]} tokens, "
                                   f"expected {bench.new_tokens}")
            return clock.timing(), new

        with torch.inference_mode():
            runs, tokens = measure(once, bench.warmup, bench.repeats)
        return make_result(self.name, runs, tokens, loaded.tokenizer, bench,
                           prompt_tokens=ids.shape[1], dtype=model_dtype(model), device=device)
