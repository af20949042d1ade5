"""``sailor data prepare``: tokenize documents into flat token shards plus a manifest.

Layout of the output folder (the nanoGPT / Megatron convention)::

    manifest.json                  dtype, vocabulary, EOS id, the tokenizer's file and SHA-256,
                                   per shard its file, token count and SHA-256, per source file
                                   its size and SHA-256; replaced last, in one rename
    train-00000-<sha12>.bin ...    flat little-endian uint16 (vocabulary <= 65536) or uint32
    val-00000-<sha12>.bin ...      token ids; <sha12> starts the file's SHA-256
    tokenizer-<sha12>.json         the tokenizer the tokens come from (copied or trained)
    tokenizer.json                 the same tokenizer under its usual name (for --tokenizer)

The manifest is the folder's dataset: files it does not name are the leftovers of an earlier
or interrupted run, removed by the next completed one.

Documents are concatenated in file order, each followed by EOS. The last ``val_fraction`` of
the stream is the validation split (the tail, so no training window overlaps it).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sailor_sim import inputs

from ..durable import durable_write, fsync_path
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
    """Write the shards and the manifest; returns the manifest.

    Preparing a folder again is one transaction: the new tokenizer and shards go to new files
    beside the old ones (their names carry their SHA-256), then manifest.json is replaced in
    one rename. Until that rename the folder is its old dataset, whole; a run stopped before
    it (Ctrl-C, SIGTERM, a full disk) removes what it wrote, and one killed leaves files that
    no manifest names, which the next completed run removes, as it removes the old dataset's
    files once the new manifest is in place."""
    cfg.check()
    files = source_files(list(cfg.inputs), cfg.out_dir)
    out = cfg.out_dir
    out.mkdir(parents=True, exist_ok=True)
    kept = _named_files(out)  # the dataset the folder holds now: never touched before the switch
    written: list[Path] = []  # what this run wrote, removed again if it stops before the switch
    try:
        new_tokenizer = out / (TOKENIZER + ".tmp")
        written.append(new_tokenizer)
        tok = _tokenizer(cfg, files, new_tokenizer)
        eos = eos_id(tok)
        vocab = tok.get_vocab_size()
        dtype = np.uint16 if vocab <= 1 << 16 else np.uint32
        stream = _token_stream(files, tok, eos, cfg.text_field, dtype)
        n_val = max(1, int(len(stream) * cfg.val_fraction))
        if len(stream) - n_val < 2:
            # An empty or blank file still yields its end-of-text token: say so, and the fix.
            raise DataError(
                f"the inputs hold {len(stream)} tokens (end-of-text ones included), too few to "
                "split into training and validation; give more text",
                field="inputs",
            )
        tok_sha = sha256_file(new_tokenizer)
        tok_file = out / f"tokenizer-{tok_sha[:HASH_CHARS]}.json"
        fsync_path(new_tokenizer)
        written.append(tok_file)
        os.replace(new_tokenizer, tok_file)
        manifest = {
            "format": FORMAT,
            "dtype": np.dtype(dtype).name,
            "vocab_size": vocab,
            "eos_id": eos,
            "tokenizer": {"file": tok_file.name, "sha256": tok_sha},
            "sources": [
                {"path": str(f), "bytes": f.stat().st_size, "sha256": sha256_file(f)} for f in files
            ],
            "val_fraction": cfg.val_fraction,
            "splits": {
                "train": _write_shards(stream[:-n_val], "train", cfg, written),
                "val": _write_shards(stream[-n_val:], "val", cfg, written),
            },
        }
        fsync_path(out)  # the new files' names are on disk before the manifest naming them
        written.append(out / (MANIFEST + ".tmp"))
        durable_write(out / MANIFEST, json.dumps(manifest, indent=1).encode(), written[-1])
        fsync_path(out)
    except BaseException:
        for path in written:
            if path.name not in kept:  # a shard of the same bytes keeps its name and its place
                path.unlink(missing_ok=True)
        raise
    _alias_tokenizer(tok_file, out / TOKENIZER)
    _remove_unnamed(out, _names(manifest))
    return manifest


HASH_CHARS = 12
"""Hex digits of a file's SHA-256 in its name: a shard or tokenizer of other bytes is another
file, so a rerun never writes over a file the current manifest names."""
_OURS = re.compile(
    rf"((train|val)-\d{{5}}(-[0-9a-f]{{{HASH_CHARS}}})?\.bin"
    rf"|tokenizer-[0-9a-f]{{{HASH_CHARS}}}\.json)(\.tmp)?"
    r"|(tokenizer|manifest)\.json\.tmp"
)
"""The files ``prepare`` writes that a completed run removes when the manifest does not name
them (the shards of an older dataset, or of a killed run, and its temporary files; names
without the SHA-256 are the shards of earlier versions)."""


def _named_files(folder: Path) -> set[str]:
    """The files the folder's manifest names (itself included), or none without a manifest."""
    try:
        return _names(json.loads((folder / MANIFEST).read_text()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return set()


def _names(manifest: dict) -> set[str]:
    named = [MANIFEST, manifest["tokenizer"]["file"]]
    named += [shard["file"] for split in manifest["splits"].values() for shard in split]
    return {name for name in named if isinstance(name, str)}


def _remove_unnamed(folder: Path, named: set[str]) -> None:
    for path in folder.iterdir():
        if path.name not in named and _OURS.fullmatch(path.name) and path.is_file():
            path.unlink(missing_ok=True)


def _alias_tokenizer(source: Path, alias: Path) -> None:
    """``tokenizer.json``: the manifest's tokenizer under the name ``--tokenizer`` users give
    (a hard link, a copy where the filesystem has none), replaced in one rename."""
    tmp = alias.with_name(alias.name + ".tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)
    except OSError:
        shutil.copyfile(source, tmp)
    os.replace(tmp, alias)


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


def _write_shards(
    tokens: np.ndarray, split: str, cfg: PrepareConfig, written: list[Path]
) -> list[dict]:
    shards = []
    for index, start in enumerate(range(0, len(tokens), cfg.shard_tokens)):
        chunk = tokens[start : start + cfg.shard_tokens]
        data = chunk.astype(chunk.dtype.newbyteorder("<"), copy=False).tobytes()
        digest = hashlib.sha256(data).hexdigest()
        path = cfg.out_dir / f"{split}-{index:05d}-{digest[:HASH_CHARS]}.bin"
        # A new file (a new inode) under a new name: a run training on this folder maps the old
        # shards, which keep their bytes (rewritten in place, a shorter shard killed it: SIGBUS).
        tmp = path.with_name(path.name + ".tmp")
        written += [tmp, path]
        durable_write(path, data, tmp)
        shards.append({"file": path.name, "tokens": int(len(chunk)), "sha256": digest})
    return shards
