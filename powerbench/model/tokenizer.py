"""A byte-level BPE tokenizer trained with `tokenizers`, wrapped for `transformers`.

Special tokens follow OPT's layout: <s>=0, <pad>=1, </s>=2 (BOS, EOS and document
separator), <unk>=3 (never produced: byte-level BPE covers every byte).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

SPECIAL_TOKENS = ("<s>", "<pad>", "</s>", "<unk>")
PAD_ID, EOS_ID = 1, 2


def train_bpe(texts: Iterable[str], vocab_size: int, min_frequency: int = 2) -> Tokenizer:
    """Train a byte-level BPE on `texts` (deterministic for the same texts)."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if vocab_size < len(alphabet) + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size {vocab_size} is below the 256 bytes + special tokens")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                  special_tokens=list(SPECIAL_TOKENS), initial_alphabet=alphabet,
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="</s> $A", pair="</s> $A </s> $B",
                                      special_tokens=[("</s>", EOS_ID)]),
    ])
    return tok


def wrap(tok: Tokenizer) -> PreTrainedTokenizerFast:
    """A transformers tokenizer: `tokenizer(text)` prepends </s> like OPT's. Like OPT's it
    sets no model_max_length (whole documents are tokenised, then cut into windows); the
    position limit is the model config's `max_position_embeddings`."""
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="</s>", eos_token="</s>",
                                   pad_token="<pad>", unk_token="<unk>")


def encode_documents(tok: Tokenizer, texts: Sequence[str]) -> list[int]:
    """Token ids of `texts`, each document followed by </s> (OPT's document separator;
    the same stream as `powerbench.evaluation.token_windows`)."""
    ids: list[int] = []
    for enc in tok.encode_batch(list(texts), add_special_tokens=False):
        ids.extend(enc.ids)
        ids.append(EOS_ID)
    return ids


def token_byte_lengths(tok: Tokenizer) -> list[int]:
    """Bytes of text each token id stands for (0 for special tokens)."""
    lengths = [0] * tok.get_vocab_size()
    for token, idx in tok.get_vocab().items():
        lengths[idx] = 0 if token in SPECIAL_TOKENS else len(token)  # byte-level: 1 char=1 byte
    return lengths
