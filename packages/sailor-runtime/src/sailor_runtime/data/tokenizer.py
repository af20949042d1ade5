"""Hugging Face tokenizers read from a local ``tokenizer.json`` (the ``tokenizers`` library;
nothing is downloaded), or trained here: a byte-level BPE (the GPT-2 scheme, Radford et al.
2019, Sec. 2.2) learned from the corpus itself, so a run needs no tokenizer from the web."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from . import DataError

EOS = "<|endoftext|>"
"""Separates documents in the token stream (GPT-2's end-of-text token)."""
MIN_BPE_VOCAB = 257
"""The smallest byte-level BPE: its 256 byte values and EOS."""
MAX_BPE_VOCAB = 2**24
"""The largest BPE trained here: the tokenizers library reserves its tables at the requested
size up front (10**11 aborted the process from Rust, out of memory); 2**24 takes ~0.1 GB, and
published vocabularies stay below 2**18."""


def check_bpe_vocab(vocab_size: int) -> None:
    """A byte-level BPE needs room for its 256 byte values and EOS, and no more entries than
    the trainer can reserve."""
    if vocab_size < MIN_BPE_VOCAB:
        raise DataError(
            f"must be >= {MIN_BPE_VOCAB} (256 bytes and {EOS}), got {vocab_size}",
            field="vocab_size",
        )
    if vocab_size > MAX_BPE_VOCAB:
        raise DataError(
            f"must be <= {MAX_BPE_VOCAB} (2**24: a byte-level BPE trained here holds at most "
            f"that; larger vocabularies come as a tokenizer.json), got {vocab_size}",
            field="vocab_size",
        )


def load_tokenizer(path: Path):
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # the library raises plain Exception for every parse failure
        raise DataError(
            f"{path} is not a Hugging Face tokenizer.json ({str(exc).splitlines()[0]}); pass "
            "a tokenizer.json file or --vocab-size N to train a byte-level BPE",
            field="tokenizer",
        ) from None


def train_byte_bpe(texts: Iterable[str], vocab_size: int, out: Path):
    """A byte-level BPE with ``vocab_size`` entries (256 bytes + EOS + merges), saved to
    ``out``. Deterministic: the same texts give the same file."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    check_bpe_vocab(vocab_size)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=alphabet,
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    tok.save(str(out))
    return tok


def eos_id(tok) -> int:
    token = tok.token_to_id(EOS)
    if token is None:
        raise DataError(
            f"the tokenizer has no {EOS} token to separate documents; add it as a special token",
            field="tokenizer",
        )
    return token
