"""Reference figures of a prepared folder that a trained model is judged against."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .shards import read_manifest


def split_tokens(folder: Path, split: str) -> np.ndarray:
    manifest = read_manifest(folder)
    dtype = np.dtype(manifest["dtype"]).newbyteorder("<")
    return np.concatenate(
        [np.fromfile(Path(folder) / s["file"], dtype) for s in manifest["splits"][split]]
    )


def unigram_cross_entropy(folder: Path) -> float:
    """Nats per token of the validation split under the training split's token frequencies
    (add-one smoothed): the loss of a model that ignores context. A model beating it by a
    margin uses context."""
    vocab = read_manifest(folder)["vocab_size"]
    counts = np.bincount(split_tokens(folder, "train"), minlength=vocab) + 1.0
    return float(-np.log(counts / counts.sum())[split_tokens(folder, "val")].mean())
