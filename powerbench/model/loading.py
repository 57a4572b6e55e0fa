"""Model loaders. Each `_target_` in conf/model returns a LoadedModel.

- `load_shape_model`: shapes only (paper-scale models: placement, simulator).
- `load_hub_model`: a real checkpoint through `transformers`, from a hub id or a local
  directory; offline it fails at once with what to do, never after minutes of retries.
- `powerbench.model.tiny_relu.load_tiny_relu`: the project's own trained ReLU model.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powerbench.hub import hub_reachable
from powerbench.model.config import ModelConfig
from powerbench.model.spec import FFNKind, ModelSpec, SparsityStats

log = logging.getLogger(__name__)


class ModelUnavailableError(RuntimeError):
    """A real checkpoint cannot be loaded here (offline, missing local path)."""


@dataclass
class LoadedModel:
    spec: ModelSpec
    model: Any | None = None  # transformers PreTrainedModel (eval mode) or None
    tokenizer: Any | None = None  # transformers PreTrainedTokenizerFast or None
    source: str = "shape"  # "shape", "hub:<id>", "local:<path>", "trained:<key>"
    weights_hash: str | None = None  # identifies the weights for cache keys

    @property
    def has_weights(self) -> bool:
        return self.model is not None

    def fingerprint(self) -> str:
        """What identifies these weights in cache keys: `weights_hash` where the loader set
        one, `shape:<name>` for a shape-only model, else a SHA-256 of every parameter and
        buffer (name, dtype, shape, bytes) and the tokenizer's name and vocabulary size."""
        if self.weights_hash:
            return str(self.weights_hash)
        if self.model is None:
            return f"shape:{self.spec.name}"
        import hashlib

        import torch

        h = hashlib.sha256()
        for name, tensor in sorted(self.model.state_dict().items()):
            t = tensor.detach().cpu().contiguous().reshape(-1)
            h.update(f"{name}:{t.dtype}:{tuple(tensor.shape)}".encode())
            h.update(t.view(torch.uint8).numpy().tobytes())
        tok = self.tokenizer
        h.update(f"{type(tok).__name__}:{getattr(tok, 'name_or_path', '')}:"
                 f"{getattr(tok, 'vocab_size', '')}".encode())
        return "sha256:" + h.hexdigest()


def stats_from_config(cfg: ModelConfig) -> SparsityStats | None:
    return None if cfg.stats is None else SparsityStats(**dataclasses.asdict(cfg.stats))


def spec_from_sections(name: str, spec: Mapping[str, Any],
                       stats: Mapping[str, Any] | None = None,
                       hf_id: str | None = None) -> ModelSpec:
    """ModelSpec from a model config's `spec` and `stats` sections as plain mappings: the
    typed config's (`spec_from_config`) or a model yaml read without Hydra (the torch-only
    experiments/bench_gpu.py), so the two cannot drift."""
    return ModelSpec(name=name, stats=SparsityStats(**stats) if stats else None, hf_id=hf_id,
                     **spec)


def spec_from_config(cfg: ModelConfig) -> ModelSpec:
    """ModelSpec from a model config's `spec`/`stats` sections (no weights touched)."""
    if cfg.spec is None:
        raise ValueError(f"model {cfg.name!r} has no `spec` section; load its weights instead")
    return spec_from_sections(cfg.name, dataclasses.asdict(cfg.spec),
                              None if cfg.stats is None else dataclasses.asdict(cfg.stats),
                              cfg.hf_id)


def load_shape_model(cfg: ModelConfig, **_: Any) -> LoadedModel:
    return LoadedModel(spec=spec_from_config(cfg), source="shape")


# ---- real checkpoints ---------------------------------------------------------------

_ACT_TO_FFN = {
    ("opt", "relu"): FFNKind.relu,
    ("llama", "relu"): FFNKind.reglu,
    ("llama", "silu"): FFNKind.swiglu,
    ("mistral", "relu"): FFNKind.reglu,
    ("mistral", "silu"): FFNKind.swiglu,
}


def spec_from_hf_config(name: str, hf_config: Any, stats: SparsityStats | None = None,
                        hf_id: str | None = None) -> ModelSpec:
    """Read shapes off a transformers config (OPT and LLaMA-family decoders)."""
    model_type = hf_config.model_type
    if model_type == "opt":
        act = hf_config.activation_function
        d_ffn, n_kv = hf_config.ffn_dim, hf_config.num_attention_heads
        tied = True
    else:
        act = getattr(hf_config, "hidden_act", "silu")
        d_ffn = hf_config.intermediate_size
        n_kv = getattr(hf_config, "num_key_value_heads", None) or hf_config.num_attention_heads
        tied = bool(getattr(hf_config, "tie_word_embeddings", False))
    key = ("opt" if model_type == "opt" else "llama" if model_type != "mistral" else "mistral",
           act)
    if key not in _ACT_TO_FFN:
        raise ValueError(f"{name}: unsupported architecture/activation {model_type}/{act}; "
                         f"supported: {sorted(_ACT_TO_FFN)}")
    return ModelSpec(
        name=name,
        n_layers=hf_config.num_hidden_layers,
        d_model=hf_config.hidden_size,
        d_ffn=d_ffn,
        n_heads=hf_config.num_attention_heads,
        n_kv_heads=n_kv,
        ffn_kind=_ACT_TO_FFN[key],
        vocab_size=hf_config.vocab_size,
        max_positions=getattr(hf_config, "max_position_embeddings", 2048),
        tied_embeddings=tied,
        stats=stats,
        hf_id=hf_id,
    )


def _offline_message(hf_id: str) -> str:
    return (
        f"cannot load {hf_id!r}: it is not a local directory, not in the local Hugging Face "
        "cache, and the hub is unreachable (or HF_HUB_OFFLINE=1). To use it: run once on a "
        f"machine with network access (`hf download {hf_id}`) and copy ~/.cache/huggingface "
        "here, or set model.hf_id to a local checkpoint directory. Offline, the default "
        "model=tiny_relu (trained by powerbench itself) works, and shape-only models "
        "(e.g. model=opt_30b) need no weights."
    )


def load_hub_model(cfg: ModelConfig, **_: Any) -> LoadedModel:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not cfg.hf_id:
        raise ValueError(f"model {cfg.name!r}: hf_id is empty")
    local = Path(cfg.hf_id).expanduser()
    is_local = local.is_dir()
    online = (not is_local) and hub_reachable()
    if not is_local and not online:
        # Make every later transformers/huggingface_hub call fail fast, not retry.
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["HF_DATASETS_OFFLINE"] = "1"
    source = str(local) if is_local else cfg.hf_id
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[
        cfg.dtype.value
    ]
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            source, revision=cfg.revision, local_files_only=not online and not is_local
        )
        model = AutoModelForCausalLM.from_pretrained(
            source, revision=cfg.revision, dtype=dtype,
            local_files_only=not online and not is_local,
        )
    except OSError as err:
        if is_local or not online:
            raise ModelUnavailableError(_offline_message(cfg.hf_id)) from err
        raise
    model.eval()
    spec = spec_from_hf_config(cfg.name, model.config, stats=stats_from_config(cfg),
                               hf_id=cfg.hf_id)
    revision = getattr(model.config, "_commit_hash", None) or cfg.revision or "local"
    return LoadedModel(
        spec=spec, model=model, tokenizer=tokenizer,
        source=("local:" if is_local else "hub:") + source,
        weights_hash=f"{cfg.hf_id}@{revision}",
    )
