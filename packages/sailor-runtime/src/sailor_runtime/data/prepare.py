"""``sailor data prepare``: tokenize documents into flat token shards plus a manifest.

Layout of the output folder (the nanoGPT / Megatron convention)::

    tokenizer.json          the tokenizer the tokens come from (copied or trained)
    train-00000.bin ...     flat little-endian uint16 (vocabulary <= 65536) or uint32 token ids
    val-00000.bin ...
    manifest.json           written last: dtype, vocabulary, EOS id, per shard its token count
                            and SHA-256, per source file its size and SHA-256

Documents are concatenated in file order, each followed by EOS. The last ``val_fraction`` of
the stream is the validation split (the tail, so no training window overlaps it).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sailor_sim import inputs

from . import DataError
from .sources import documents, source_files
from .tokenizer import check_bpe_vocab, eos_id, load_tokenizer, train_byte_bpe

FORMAT = "sailor-tokens/1"
MANIFEST = "manifest.json"
TOKENIZER = "tokenizer.json"


@dataclass(frozen=True)
class PrepareConfig:
    inputs: tuple[Path, ...]
    """Text / JSONL / Parquet files, or folders holding them."""
    out_dir: Path
    tokenizer: Path | None = None
    """A local tokenizer.json; None trains a byte-level BPE of ``vocab_size`` on the inputs."""
    vocab_size: int = 4096
    """Entries of the trained BPE (ignored with ``tokenizer``)."""
    val_fraction: float = 0.1
    """Share of the token stream (its tail) kept for validation."""
    shard_tokens: int = 1 << 24
    """Most tokens per shard file."""
    text_field: str = "text"
    """JSONL field / Parquet column holding the text."""

    def check(self) -> None:
        if not 0 < self.val_fraction < 1:
            raise DataError(f"must be in (0, 1), got {self.val_fraction}", field="val_fraction")
        if self.shard_tokens < 1:
            raise DataError(f"must be >= 1, got {self.shard_tokens}", field="shard_tokens")
        if self.tokenizer is not None and not self.tokenizer.is_file():
            raise DataError(f"{self.tokenizer} is not a file", field="tokenizer")
        if self.tokenizer is None:
            check_bpe_vocab(self.vocab_size)
        if not self.text_field.strip():
            raise DataError(
                "must name the JSONL field / Parquet column of the text", field="text_field"
            )
        inputs.output_folder(self.out_dir, "out")  # before the inputs are read and tokenized


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def prepare(cfg: PrepareConfig) -> dict:
    """Write the shards and the manifest; returns the manifest."""
    cfg.check()
    files = source_files(list(cfg.inputs), cfg.out_dir)
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    # Everything that can fail on the inputs runs before the folder changes: a rerun over a
    # prepared folder that stops on a bad file keeps the folder as it was (it lost its
    # manifest and tokenizer.json, and with them the data).
    new_tokenizer = cfg.out_dir / (TOKENIZER + ".tmp")
    try:
        tok = _tokenizer(cfg, files, new_tokenizer)
        eos = eos_id(tok)
        vocab = tok.get_vocab_size()
        dtype = np.uint16 if vocab <= 1 << 16 else np.uint32
        stream = _token_stream(files, tok, eos, cfg.text_field, dtype)
        n_val = max(1, int(len(stream) * cfg.val_fraction))
        if len(stream) - n_val < 2:
            raise DataError(f"{len(stream)} tokens are too few to split", field="inputs")
    except BaseException:
        new_tokenizer.unlink(missing_ok=True)
        raise
    (cfg.out_dir / MANIFEST).unlink(missing_ok=True)  # a half-rewritten folder has no manifest
    os.replace(new_tokenizer, cfg.out_dir / TOKENIZER)
    manifest = {
        "format": FORMAT,
        "dtype": np.dtype(dtype).name,
        "vocab_size": vocab,
        "eos_id": eos,
        "tokenizer": {"file": TOKENIZER, "sha256": sha256_file(cfg.out_dir / TOKENIZER)},
        "sources": [
            {"path": str(f), "bytes": f.stat().st_size, "sha256": sha256_file(f)} for f in files
        ],  # fmt: skip
        "val_fraction": cfg.val_fraction,
        "splits": {
            "train": _write_shards(stream[:-n_val], "train", cfg),
            "val": _write_shards(stream[-n_val:], "val", cfg),
        },
    }
    tmp = cfg.out_dir / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1))
    os.replace(tmp, cfg.out_dir / MANIFEST)
    return manifest


def _tokenizer(cfg: PrepareConfig, files: list[Path], target: Path):
    """The tokenizer, trained or read, saved as ``target``."""
    if cfg.tokenizer is None:
        texts = (doc for f in files for doc in documents(f, cfg.text_field))
        return train_byte_bpe(texts, cfg.vocab_size, target)
    tok = load_tokenizer(cfg.tokenizer)
    shutil.copyfile(cfg.tokenizer, target)  # the folder's own tokenizer.json too
    return tok


def _token_stream(files, tok, eos: int, text_field: str, dtype) -> np.ndarray:
    parts: list[np.ndarray] = []
    for f in files:
        docs = list(documents(f, text_field))
        for enc in tok.encode_batch(docs, add_special_tokens=False):
            parts.append(np.asarray(enc.ids + [eos], dtype=dtype))
    if not parts:
        raise DataError("the inputs hold no documents", field="inputs")
    return np.concatenate(parts)


def _write_shards(tokens: np.ndarray, split: str, cfg: PrepareConfig) -> list[dict]:
    shards = []
    for index, start in enumerate(range(0, len(tokens), cfg.shard_tokens)):
        chunk = tokens[start : start + cfg.shard_tokens]
        path = cfg.out_dir / f"{split}-{index:05d}.bin"
        # written beside and renamed over: a run training on this folder maps the old file,
        # which must keep its bytes (rewritten in place, a shorter shard killed it: SIGBUS)
        tmp = path.with_name(path.name + ".tmp")
        chunk.astype(chunk.dtype.newbyteorder("<"), copy=False).tofile(tmp)
        os.replace(tmp, path)
        shards.append({"file": path.name, "tokens": int(len(chunk)), "sha256": sha256_file(path)})
    return shards
