"""`run_engine`: the pipeline's single entry point into the engines.

The engine class comes from the config's `_target_`; adding an engine (or a sparse
variant of our loop) is a yaml under conf/engine/ plus the class it names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from powerbench.build import build
from powerbench.engine.base import EngineResult
from powerbench.engine.config import EngineConfig
from powerbench.engine.prompts import build_prompt_batch
from powerbench.threads import torch_threads

if TYPE_CHECKING:
    from powerbench.config.schema import BenchConfig
    from powerbench.engine.base import Engine
    from powerbench.model.loading import LoadedModel


def build_engine(engine_cfg: EngineConfig) -> Engine:
    """The engine named by the typed config's `_target_`, built from the config."""
    return build(engine_cfg)


def run_engine(engine_cfg: EngineConfig, loaded_model: LoadedModel, prompts: list[str],
               bench: BenchConfig, **context: Any) -> EngineResult:
    """Measure one engine on `bench.batch_size` rows of exactly `bench.prompt_tokens` tokens.

    `engine_cfg`: a typed conf/engine config (its `_target_` is the engine class).
    `context`: extra keyword arguments for the engine's `run` (and, for DecoderEngine,
    offered to its FFN: e.g. predictors=, placement=, observer=).
    """
    if bench.new_tokens < 2:
        raise ValueError("bench.new_tokens must be >= 2 (one prefill token + decode steps)")
    if bench.repeats < 1 or bench.warmup < 0:
        raise ValueError(f"bench.repeats={bench.repeats} (>= 1), warmup={bench.warmup} (>= 0)")
    engine = build_engine(engine_cfg)
    input_ids = build_prompt_batch(loaded_model.tokenizer, prompts, bench.prompt_tokens,
                                   bench.batch_size)
    with torch_threads(bench.threads), torch.inference_mode():
        return engine.run(loaded_model, input_ids, bench, **context)
