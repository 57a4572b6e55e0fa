"""ActivationProfile <-> compressed .npz, and the content-keyed profile cache.

File layout (np.savez_compressed, no pickles): `header` (JSON: format version, model,
source, dataset, n_tokens, meta, per-layer shapes), `sample_positions`, and per layer i:
`L{i}.counts`, `L{i}.token_active`, `L{i}.hidden`, `L{i}.masks` (np.packbits along
neurons, see profile.pack_masks), `L{i}.trace` (already packed). A file whose arrays do
not match its header raises ProfileFormatError.

`load_or_profile` keys a cache entry by the weights (LoadedModel.weights_hash, or a hash of
the state dict when that is None), the dataset name and a digest of the texts, every
ProfilingConfig setting that changes the result (not batch_size), the sampling seed and
PROFILER_VERSION. A truncated or corrupt entry fails its checksum (or its load) and is
rebuilt with a warning (powerbench.cache.ArtifactCache).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from powerbench.cache import ArtifactCache, stable_hash
from powerbench.config.schema import ProfilingConfig
from powerbench.model.loading import LoadedModel
from powerbench.paths import cache_dir as default_cache_dir
from powerbench.profiling.activation_profile import (
    ActivationProfile,
    LayerProfile,
    pack_masks,
    unpack_masks,
)
from powerbench.profiling.profiler import PROFILER_VERSION, profile_model

FORMAT_VERSION = 1
CACHE_SUBDIR = "profiles"


class ProfileFormatError(ValueError):
    """A profile file that does not hold what its header says."""


def save_profile(profile: ActivationProfile, path: Path | str) -> None:
    arrays: dict[str, np.ndarray] = {}
    layers_info = []
    for i, layer in enumerate(profile.layers):
        arrays[f"L{i}.counts"] = np.asarray(layer.counts, dtype=np.int64)
        arrays[f"L{i}.token_active"] = np.asarray(layer.token_active, dtype=np.float32)
        if layer.hidden is not None:
            arrays[f"L{i}.hidden"] = np.asarray(layer.hidden, dtype=np.float16)
        if layer.masks is not None:
            arrays[f"L{i}.masks"] = pack_masks(layer.masks)
        if layer.trace is not None:
            arrays[f"L{i}.trace"] = np.asarray(layer.trace, dtype=np.uint8)
        layers_info.append({
            "index": layer.index, "n_neurons": layer.n_neurons, "n_tokens": layer.n_tokens,
            "n_samples": None if layer.masks is None else int(layer.masks.shape[0]),
            "has_hidden": layer.hidden is not None, "trace_tokens": layer.trace_tokens,
        })
    if profile.sample_positions is not None:
        arrays["sample_positions"] = np.asarray(profile.sample_positions, dtype=np.int64)
    header = {
        "format": FORMAT_VERSION, "model": profile.model, "source": profile.source,
        "dataset": profile.dataset, "n_tokens": profile.n_tokens, "meta": profile.meta,
        "layers": layers_info,
    }
    arrays["header"] = np.array(json.dumps(header, default=_json_default))
    with open(path, "wb") as f:  # a file object: savez would append ".npz" to a name
        np.savez_compressed(f, **arrays)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return str(obj)


def _check(cond: bool, path: Path | str, what: str) -> None:
    if not cond:
        raise ProfileFormatError(f"{path}: {what}")


def load_profile(path: Path | str) -> ActivationProfile:
    with np.load(path, allow_pickle=False) as data:
        _check("header" in data.files, path, "no header")
        header = json.loads(str(data["header"]))
        _check(header.get("format") == FORMAT_VERSION, path,
               f"format {header.get('format')} != {FORMAT_VERSION}")
        layers = []
        for i, info in enumerate(header["layers"]):
            n, tokens = info["n_neurons"], info["n_tokens"]
            counts = data[f"L{i}.counts"]
            token_active = data[f"L{i}.token_active"]
            _check(counts.shape == (n,) and counts.dtype == np.int64, path, f"L{i}.counts")
            _check(token_active.shape == (tokens,), path, f"L{i}.token_active")
            masks = hidden = trace = None
            if info["n_samples"] is not None:
                packed = data[f"L{i}.masks"]
                _check(packed.shape == (info["n_samples"], (n + 7) // 8), path, f"L{i}.masks")
                masks = unpack_masks(packed, n)
            if info["has_hidden"]:
                hidden = data[f"L{i}.hidden"]
                _check(masks is not None and hidden.shape[0] == masks.shape[0], path,
                       f"L{i}.hidden")
            if info["trace_tokens"]:
                trace = data[f"L{i}.trace"]
                _check(trace.shape == (info["trace_tokens"], (n + 7) // 8), path, f"L{i}.trace")
            layers.append(LayerProfile(index=info["index"], counts=counts, n_tokens=tokens,
                                       token_active=token_active, hidden=hidden, masks=masks,
                                       trace=trace))
        positions = data["sample_positions"] if "sample_positions" in data.files else None
    return ActivationProfile(model=header["model"], source=header["source"],
                             dataset=header["dataset"], n_tokens=header["n_tokens"],
                             layers=layers, meta=header["meta"], sample_positions=positions)


# ---- cache keys -------------------------------------------------------------------------------


def texts_digest(texts: list[str]) -> str:
    h = hashlib.sha256()
    for text in texts:
        raw = text.encode("utf-8")
        h.update(len(raw).to_bytes(8, "little"))
        h.update(raw)
    return h.hexdigest()


def weights_fingerprint(loaded: LoadedModel) -> str:
    """The model's fingerprint (LoadedModel.fingerprint); profiling needs its weights."""
    if loaded.model is None:
        raise ValueError(f"{loaded.spec.name}: no weights to fingerprint")
    return loaded.fingerprint()


def profile_cache_key(loaded: LoadedModel, texts: list[str], cfg: ProfilingConfig, dataset: str,
                      seed: int = 0) -> str:
    settings = asdict(cfg)
    settings.pop("batch_size", None)  # does not change what is recorded
    digest = stable_hash({
        "weights": weights_fingerprint(loaded), "ffn_kind": loaded.spec.ffn_kind.value,
        "dataset": dataset, "texts": texts_digest(texts), "settings": settings,
        "seed": seed, "profiler": PROFILER_VERSION, "format": FORMAT_VERSION,
    })
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in loaded.spec.name)
    return f"{safe}-{digest}"


def load_or_profile(loaded: LoadedModel, split_texts: list[str], cfg: ProfilingConfig,
                    dataset: str, cache_dir: Path | str | None = None, seed: int = 0,
                    progress: bool = True) -> tuple[ActivationProfile, bool]:
    """(profile, hit): the cached measured profile, or a fresh one stored for next time.

    `cache_dir` is the powerbench cache root (default powerbench.paths.cache_dir());
    entries live in `<cache_dir>/profiles/<model>-<key>.npz` (+ `.npz.json` checksum).
    """
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    cache = ArtifactCache(root / CACHE_SUBDIR, suffix=".npz")
    key = profile_cache_key(loaded, split_texts, cfg, dataset, seed)
    return cache.get_or_build(
        key,
        build=lambda: profile_model(loaded, split_texts, cfg, dataset, seed=seed,
                                    progress=progress),
        save=save_profile,
        load=load_profile,
        meta={"model": loaded.spec.name, "dataset": dataset, "n_texts": len(split_texts),
              "profiler_version": PROFILER_VERSION},
    )
