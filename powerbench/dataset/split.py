"""Deterministic train / held-out split of documents.

A document's side depends only on its own text and the seed: held out iff
`heldout_score(text, seed) < heldout_fraction`. Capping the corpus, reordering it or
adding documents never moves a document across the split, and identical texts (removed
anyway by de-duplication) always land on the same side.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field

from powerbench.cache import stable_hash
from powerbench.dataset.errors import DatasetError


def heldout_score(text: str, seed: int = 0) -> float:
    """A uniform number in [0, 1) fixed by (seed, text)."""
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8,
                             key=str(seed).encode()).digest()
    return int.from_bytes(digest, "big") / 2.0**64


@dataclass
class TextSplit:
    """Documents of one dataset, split into train (profiling, predictor training) and
    held-out (evaluation, benchmark prompts)."""

    name: str
    source: str  # where the text came from, human readable
    train: list[str]
    heldout: list[str]
    heldout_fraction: float
    split_seed: int
    meta: dict = field(default_factory=dict)

    def fingerprint(self) -> str:
        """Identifies the exact texts on both sides (for cache keys of derived artifacts)."""
        h = hashlib.sha256()
        for side in (self.train, self.heldout):
            for text in side:
                h.update(text.encode("utf-8", "surrogatepass"))
                h.update(b"\x00")
            h.update(b"\x01")
        return stable_hash(self.name, self.heldout_fraction, self.split_seed, h.hexdigest())

    def summary(self) -> dict[str, float]:
        return {
            "dataset_train_docs": float(len(self.train)),
            "dataset_heldout_docs": float(len(self.heldout)),
            "dataset_train_chars": float(sum(map(len, self.train))),
            "dataset_heldout_chars": float(sum(map(len, self.heldout))),
        }


def collect_docs(texts: Iterable[str], max_docs: int | None = None,
                 min_chars: int = 1) -> tuple[list[str], dict[str, int]]:
    """Strip, drop short and duplicate documents, stop after `max_docs` (source order)."""
    if max_docs is not None and max_docs <= 0:
        raise ValueError(f"max_docs must be positive or None, got {max_docs}")
    seen: dict[str, None] = {}
    stats = {"docs_read": 0, "docs_short": 0, "docs_duplicate": 0}
    for raw in texts:
        if max_docs is not None and len(seen) >= max_docs:
            break
        stats["docs_read"] += 1
        text = raw.strip()
        if len(text) < max(min_chars, 1):
            stats["docs_short"] += 1
        elif text in seen:
            stats["docs_duplicate"] += 1
        else:
            seen[text] = None
    return list(seen), stats


def split_texts(docs: list[str], heldout_fraction: float, seed: int) -> tuple[list[str],
                                                                                list[str]]:
    """(train, held-out), each in source order; disjoint and deterministic.

    If the hash rule holds out nothing from two or more documents (tiny corpora), the
    document with the lowest score is held out, so evaluation always has text.
    """
    if not 0.0 <= heldout_fraction < 1.0:
        raise ValueError(f"heldout_fraction must be in [0, 1), got {heldout_fraction}")
    scores = [heldout_score(text, seed) for text in docs]
    held = [s < heldout_fraction for s in scores]
    if heldout_fraction > 0 and len(docs) >= 2 and not any(held):
        held[min(range(len(docs)), key=scores.__getitem__)] = True
    train = [t for t, h in zip(docs, held, strict=True) if not h]
    heldout = [t for t, h in zip(docs, held, strict=True) if h]
    return train, heldout


def make_split(name: str, source: str, texts: Iterable[str], *, heldout_fraction: float,
               split_seed: int, max_docs: int | None = None, min_chars: int = 1,
               meta: dict | None = None) -> TextSplit:
    docs, stats = collect_docs(texts, max_docs=max_docs, min_chars=min_chars)
    if not docs:
        raise DatasetError(f"dataset {name!r} ({source}) has no usable documents "
                           f"({stats['docs_read']} read)")
    train, heldout = split_texts(docs, heldout_fraction, split_seed)
    if not train or (heldout_fraction > 0 and not heldout):
        raise DatasetError(
            f"dataset {name!r} ({source}): {len(docs)} usable document(s) of "
            f"{stats['docs_read']} read ({stats['docs_short']} too short, "
            f"{stats['docs_duplicate']} duplicates): too few for a train and a held-out part; "
            "the file needs at least 2 distinct non-empty documents")
    return TextSplit(name=name, source=source, train=train, heldout=heldout,
                     heldout_fraction=heldout_fraction, split_seed=split_seed,
                     meta={**(meta or {}), **stats, "docs": len(docs)})
