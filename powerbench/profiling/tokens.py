"""Texts -> the deterministic token sequences the profiler pushes through a model.

Documents are tokenized without special tokens and concatenated, each followed by EOS
(empty ones skipped), into one stream. The stream is cut into sequences of `seq_len`
tokens; each sequence starts with BOS when the tokenizer has one (as the model sees text
at inference), then `seq_len - 1` stream tokens. Tokens are taken until `max_tokens`
(BOS included); the last sequence may be shorter. No padding anywhere: every position
is a real token, and "profiled token t" is position t of the sequences laid end to end.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

_TOKENIZE_CHUNK = 64  # documents tokenized per call (fast tokenizers batch internally)


def token_stream(tokenizer: Any, texts: Sequence[str], limit: int) -> list[int]:
    """Concatenated token ids of `texts`, each followed by EOS, at most `limit` ids."""
    eos = getattr(tokenizer, "eos_token_id", None)
    stream: list[int] = []
    for start in range(0, len(texts), _TOKENIZE_CHUNK):
        chunk = list(texts[start:start + _TOKENIZE_CHUNK])
        for ids in tokenizer(chunk, add_special_tokens=False)["input_ids"]:
            if len(ids) == 0:  # empty documents add nothing, not even EOS
                continue
            stream.extend(int(i) for i in ids)
            if eos is not None:
                stream.append(int(eos))
        if len(stream) >= limit:
            break
    return stream[:limit]


def profiling_sequences(tokenizer: Any, texts: Sequence[str], seq_len: int,
                        max_tokens: int) -> list[list[int]]:
    """The sequences to profile (see module doc); at most `max_tokens` tokens in all."""
    if seq_len < 2 or max_tokens < 1:
        raise ValueError(f"need seq_len >= 2 and max_tokens >= 1, got {seq_len}, {max_tokens}")
    bos = getattr(tokenizer, "bos_token_id", None)
    prefix = [int(bos)] if bos is not None else []
    body = seq_len - len(prefix)
    stream = token_stream(tokenizer, texts, max_tokens)
    sequences: list[list[int]] = []
    used, pos = 0, 0
    while pos < len(stream) and used < max_tokens:
        take = min(body, max_tokens - used - len(prefix), len(stream) - pos)
        if take <= 0:
            break
        sequences.append(prefix + stream[pos:pos + take])
        pos += take
        used += take + len(prefix)
    if not sequences:
        raise ValueError("no tokens to profile: the texts are empty")
    return sequences


def batches(sequences: list[list[int]], batch_size: int) -> Iterator[list[list[int]]]:
    """Consecutive batches of equal-length sequences (a shorter one goes alone)."""
    batch: list[list[int]] = []
    for seq in sequences:
        if batch and (len(batch) == batch_size or len(seq) != len(batch[0])):
            yield batch
            batch = []
        batch.append(seq)
    if batch:
        yield batch
