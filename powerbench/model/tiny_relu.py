"""`tiny_relu`: the project's own OPT-architecture ReLU decoder, trained here on ShareGPT.

`load_tiny_relu` returns a cached model at once, or builds it (deterministically, about two
minutes on two cores with the default TinyTrainConfig):

1. the TRAIN split of the bundled ShareGPT conversations (same split rule as
   `dataset=sharegpt`, so its held-out documents are never trained on);
2. a byte-level BPE tokenizer trained on that text with `tokenizers`;
3. a `transformers.OPTForCausalLM` (ReLU fc1/fc2) trained with AdamW + cosine schedule;
4. held-out perplexity and the add-one unigram perplexity of the same tokens.

The result lives in `<cache>/models/tiny_relu-<key>/` (a transformers checkpoint:
config.json, model.safetensors, tokenizer files, report.json), each file checksummed
through `ArtifactCache`; a missing or corrupt file means the model is rebuilt.
The key hashes the TinyTrainConfig, the data identity and the code/library versions.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import tokenizers
import torch
import transformers
from transformers import OPTConfig, OPTForCausalLM, PreTrainedTokenizerFast

from powerbench.cache import ArtifactCache, file_lock, stable_hash
from powerbench.dataset.config import DatasetConfig
from powerbench.dataset.sharegpt import file_fingerprint, load_sharegpt, sharegpt_file
from powerbench.dataset.split import TextSplit
from powerbench.load_window import load_average
from powerbench.model import tokenizer as bpe
from powerbench.model.config import ModelConfig, TinyTrainConfig
from powerbench.model.loading import LoadedModel, spec_from_hf_config
from powerbench.model.train import (
    TrainReport,
    deterministic_cpu,
    model_nll,
    optimize,
    scored_bytes,
    unigram_nll,
    windows,
)
from powerbench.paths import cache_dir as default_cache_dir

log = logging.getLogger(__name__)

# Bump when a change to this module, train.py or tokenizer.py changes the trained weights
# (not for tokenizer-wrapper settings such as model_max_length: those leave weights alone).
CODE_VERSION = 1
REPORT_FILE = "report.json"
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", REPORT_FILE)


@dataclass
class TinyLoadedModel(LoadedModel):
    """A LoadedModel plus how it was trained (`report`: the pipeline's tiny_* metrics)."""

    report: dict[str, float] = field(default_factory=dict)
    train_report: TrainReport | None = None
    directory: Path | None = None


# ---- identity ------------------------------------------------------------------------------

def tiny_config(cfg: ModelConfig | TinyTrainConfig | None) -> TinyTrainConfig:
    if isinstance(cfg, TinyTrainConfig):
        return cfg
    return (cfg.tiny if cfg is not None else None) or TinyTrainConfig()


def data_identity(tiny: TinyTrainConfig) -> str:
    """The training text: bundled ShareGPT file (cheap fingerprint) + split rule."""
    with sharegpt_file() as path:
        return stable_hash("sharegpt", path.name, file_fingerprint(path), tiny.heldout_fraction,
                           tiny.split_seed, tiny.max_docs)


def cache_key(tiny: TinyTrainConfig) -> str:
    versions = (torch.__version__, transformers.__version__, tokenizers.__version__)
    return stable_hash(asdict(tiny), data_identity(tiny), CODE_VERSION, versions)


def model_dir(key: str, cache_dir: str | os.PathLike | None = None) -> Path:
    return default_cache_dir(cache_dir) / "models" / f"tiny_relu-{key}"


# ---- the checksummed directory --------------------------------------------------------------

def _entries(directory: Path) -> ArtifactCache:
    """Each file of the checkpoint is one ArtifactCache entry (file + `<file>.json` sidecar)."""
    return ArtifactCache(directory, suffix="")


def is_valid(directory: Path) -> bool:
    """All files present and matching their checksums (report.json lists the files)."""
    entries = _entries(directory)
    if not all(entries.valid(name) for name in REQUIRED_FILES):
        return False
    try:
        files = json.loads((directory / REPORT_FILE).read_text())["files"]
    except (OSError, ValueError, KeyError):
        return False
    return all(entries.valid(name) for name in files)


def _discard(directory: Path) -> None:
    """Remove a broken checkpoint (renamed first, so no reader sees it half-deleted)."""
    trash = directory.with_name(f".{directory.name}.{os.getpid()}.{time.monotonic_ns()}.trash")
    try:
        os.rename(directory, trash)
    except FileNotFoundError:  # already gone (e.g. discarded by another process)
        return
    shutil.rmtree(trash, ignore_errors=True)


def _publish(model: OPTForCausalLM, tokenizer: PreTrainedTokenizerFast, report: TrainReport,
             directory: Path) -> None:
    """Write the checkpoint into a staging directory, checksum every file, rename into place."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}."))
    try:
        with tempfile.TemporaryDirectory(dir=directory.parent) as raw_dir:
            raw = Path(raw_dir)
            model.save_pretrained(raw, safe_serialization=True)
            tokenizer.save_pretrained(raw)
            files = sorted(p.name for p in raw.iterdir() if p.is_file())
            entries = _entries(staging)
            for name in files:
                entries.store(name, lambda dst, src=raw / name: shutil.copyfile(src, dst),
                              meta={"key": report.key})
        record = dict(report.to_dict(), files=files)
        entries.store(REPORT_FILE, lambda dst: dst.write_text(json.dumps(record, indent=1)),
                      meta={"key": report.key})
        staging.chmod(0o755)  # mkdtemp makes it private; the cache is shared like the others
        try:
            os.rename(staging, directory)
        except OSError:  # another process published the same key first
            log.info("tiny_relu %s was published concurrently; keeping that copy", report.key)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _read_report(directory: Path) -> TrainReport:
    record = json.loads((directory / REPORT_FILE).read_text())
    record.pop("files", None)
    return TrainReport(**record)


def _load_checkpoint(directory: Path) -> tuple[OPTForCausalLM, PreTrainedTokenizerFast,
                                                 TrainReport]:
    tokenizer = PreTrainedTokenizerFast.from_pretrained(directory)
    model = OPTForCausalLM.from_pretrained(directory, dtype=torch.float32)
    return model.eval(), tokenizer, _read_report(directory)


# ---- building --------------------------------------------------------------------------------

def training_texts(tiny: TinyTrainConfig) -> TextSplit:
    """ShareGPT documents under the `dataset=sharegpt` split rule."""
    cfg = DatasetConfig(_target_="powerbench.dataset.sharegpt.load_sharegpt", name="sharegpt",
                        heldout_fraction=tiny.heldout_fraction, split_seed=tiny.split_seed,
                        max_docs=tiny.max_docs)
    return load_sharegpt(cfg)


def _prefix(texts: list[str], chars: int) -> list[str]:
    """The first documents holding at least `chars` characters (source order)."""
    out: list[str] = []
    total = 0
    for text in texts:
        if total >= chars:
            break
        out.append(text)
        total += len(text)
    return out


def opt_config(tiny: TinyTrainConfig) -> OPTConfig:
    if tiny.d_model % tiny.n_heads:
        raise ValueError(f"d_model {tiny.d_model} is not divisible by n_heads {tiny.n_heads}")
    if tiny.max_positions < tiny.seq_len:
        raise ValueError(f"max_positions {tiny.max_positions} < seq_len {tiny.seq_len}")
    return OPTConfig(
        vocab_size=tiny.vocab_size, hidden_size=tiny.d_model, word_embed_proj_dim=tiny.d_model,
        num_hidden_layers=tiny.n_layers, ffn_dim=tiny.d_ffn,
        num_attention_heads=tiny.n_heads, max_position_embeddings=tiny.max_positions,
        activation_function="relu", do_layer_norm_before=True, enable_bias=True,
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, layerdrop=0.0,
        pad_token_id=bpe.PAD_ID, bos_token_id=bpe.EOS_ID, eos_token_id=bpe.EOS_ID,
        tie_word_embeddings=True,
    )


def train_tiny_relu(tiny: TinyTrainConfig, key: str = "", progress: bool = True
                    ) -> tuple[OPTForCausalLM, PreTrainedTokenizerFast, TrainReport]:
    """Build the tokenizer and model from scratch (deterministic for a given config)."""
    start = time.perf_counter()
    with deterministic_cpu(tiny.threads, tiny.seed):
        split = training_texts(tiny)
        t0 = time.perf_counter()
        tok = bpe.train_bpe(_prefix(split.train, tiny.tokenizer_chars), tiny.vocab_size)
        tokenizer_time = time.perf_counter() - t0
        train_stream = torch.tensor(bpe.encode_documents(tok, _prefix(split.train,
                                                                      tiny.train_chars)))
        heldout_stream = torch.tensor(bpe.encode_documents(tok, _prefix(
            split.heldout, tiny.eval_tokens * 8)))  # ~3 chars/token: plenty
        log.info("tiny_relu: %d train docs -> %d tokens; tokenizer %d tokens in %.1f s",
                 len(split.train), train_stream.numel(), tok.get_vocab_size(), tokenizer_time)

        torch.manual_seed(tiny.seed)
        model = OPTForCausalLM(opt_config(tiny))
        model.config.use_cache = True
        result = optimize(model, train_stream, tiny, progress=progress)

        held = windows(heldout_stream, tiny.seq_len, tiny.eval_tokens)
        targets = held[:, 1:]
        nll = model_nll(model, held)
        uni = unigram_nll(train_stream, targets, tiny.vocab_size)
    n_scored = targets.numel()
    report = TrainReport(
        key=key,
        train_time_s=time.perf_counter() - start,
        tokenizer_time_s=tokenizer_time,
        optimize_time_s=result.time_s,
        steps=tiny.steps,
        tokens_seen=result.tokens_seen,
        train_stream_tokens=train_stream.numel(),
        final_train_loss=result.final_loss,
        heldout_tokens=n_scored,
        heldout_perplexity=float(torch.tensor(nll / n_scored).exp()),
        unigram_perplexity=float(torch.tensor(uni / n_scored).exp()),
        heldout_bits_per_byte=nll / max(scored_bytes(targets, bpe.token_byte_lengths(tok)), 1)
        / float(torch.log(torch.tensor(2.0))),
        n_params=sum(p.numel() for p in model.parameters()),
        train_docs=len(split.train),
        heldout_docs=len(split.heldout),
        threads=tiny.threads,
        load_average=load_average(),
        versions={"torch": torch.__version__, "transformers": transformers.__version__,
                  "tokenizers": tokenizers.__version__, "code": str(CODE_VERSION)},
    )
    log.info("tiny_relu trained in %.1f s (optimisation %.1f s, %d tokens, load %s): held-out "
             "perplexity %.2f vs unigram %.2f (%.3f bits/byte)", report.train_time_s,
             report.optimize_time_s, report.tokens_seen, report.load_average,
             report.heldout_perplexity, report.unigram_perplexity, report.heldout_bits_per_byte)
    return model, bpe.wrap(tok), report


# ---- public entry points ---------------------------------------------------------------------

def ensure_tiny_relu(tiny: TinyTrainConfig, cache_dir: str | os.PathLike | None = None,
                     progress: bool = True) -> tuple[Path, bool]:
    """The checkpoint directory for `tiny`, trained now if missing or corrupt; (dir, hit)."""
    key = cache_key(tiny)
    directory = model_dir(key, cache_dir)
    if is_valid(directory):
        return directory, True
    # concurrent first runs: one trains, the others wait on this lock and find it built
    with file_lock(directory.with_name(f".{directory.name}.lock")):
        if is_valid(directory):
            return directory, True
        if directory.exists():
            log.warning("tiny_relu checkpoint %s is incomplete or corrupt (checksum mismatch); "
                        "retraining", directory)
            _discard(directory)
        log.info("tiny_relu %s not cached; training it (about two minutes on two cores)", key)
        model, tokenizer, report = train_tiny_relu(tiny, key=key, progress=progress)
        _publish(model, tokenizer, report, directory)
    return directory, False


def load_tiny_relu(cfg: ModelConfig, cache_dir: str | os.PathLike | None = None,
                   progress: bool = True, **_: Any) -> TinyLoadedModel:
    """The trained tiny_relu model (cached; trained on first use)."""
    mcfg = cfg
    tiny = tiny_config(cfg)
    directory, hit = ensure_tiny_relu(tiny, cache_dir, progress)
    try:
        model, tokenizer, report = _load_checkpoint(directory)
    except Exception as err:  # noqa: BLE001 - an unreadable checkpoint is rebuilt once
        log.warning("tiny_relu checkpoint %s unreadable (%s); retraining", directory, err)
        _discard(directory)
        directory, hit = ensure_tiny_relu(tiny, cache_dir, progress)
        model, tokenizer, report = _load_checkpoint(directory)
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[
        mcfg.dtype.value]
    model = model.to(dtype)
    log.info("tiny_relu %s %s: held-out perplexity %.2f (unigram %.2f), trained in %.1f s",
             report.key, "loaded from cache" if hit else "trained now",
             report.heldout_perplexity, report.unigram_perplexity, report.train_time_s)
    spec = spec_from_hf_config(mcfg.name, model.config, hf_id=None)
    return TinyLoadedModel(spec=spec, model=model, tokenizer=tokenizer,
                           source=f"trained:{report.key}", weights_hash=report.key,
                           report=report.metrics(), train_report=report, directory=directory)


def tiny_relu_report(cfg: ModelConfig | TinyTrainConfig | None = None,
                     cache_dir: str | os.PathLike | None = None) -> TrainReport | None:
    """How the cached tiny_relu for `cfg` was trained; None if it is not cached (no training)."""
    directory = model_dir(cache_key(tiny_config(cfg)), cache_dir)
    return _read_report(directory) if is_valid(directory) else None
