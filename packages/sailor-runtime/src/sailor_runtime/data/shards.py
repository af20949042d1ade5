"""Fixed-length samples streamed from the memory-mapped token shards of ``prepare``.

Each shard is cut into non-overlapping windows of ``seq_len + 1`` tokens (inputs and the
labels shifted by one); a window never spans two shards. Windows are numbered across the
split's shards in manifest order; that number is the sample id the order (``order``) permutes.
Opening checks each shard against the manifest (size, and SHA-256 unless ``verify=False``).
"""

from __future__ import annotations

import bisect
import json
from pathlib import Path

import numpy as np
import torch

from . import DataError
from .order import EpochOrder
from .prepare import FORMAT, MANIFEST, sha256_file


def read_manifest(folder: Path, field: str = "data_dir") -> dict:
    """The manifest of a prepared folder; errors name ``field`` (the caller's name for it)."""
    path = Path(folder) / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except OSError as exc:
        raise DataError(
            f"cannot read {path} ({exc.strerror}); make it with `sailor data prepare`",
            field=field,
        ) from None
    except json.JSONDecodeError as exc:
        raise DataError(f"{path} is not JSON ({exc.msg})", field=field) from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise DataError(f"{path} is not a {FORMAT} manifest; prepare it again", field=field)
    problem = _manifest_problem(manifest)
    if problem:  # else a KeyError in `sailor run` ("internal error") or in every rank
        raise DataError(f"{path}: {problem}; prepare the folder again", field=field)
    return manifest


def _manifest_problem(manifest: dict) -> str | None:
    """What is wrong with the shape of a manifest (the keys the readers use), or None."""

    def whole(value, minimum: int) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= minimum

    if not whole(manifest.get("vocab_size"), 1):
        return f"vocab_size must be a whole number >= 1, got {manifest.get('vocab_size')!r:.40}"
    if manifest.get("dtype") not in ("uint16", "uint32"):
        return f"dtype must be uint16 or uint32, got {manifest.get('dtype')!r:.40}"
    splits = manifest.get("splits")
    if not isinstance(splits, dict) or not all(isinstance(splits.get(k), list) for k in SPLITS):
        return f"splits must hold the lists {list(SPLITS)}"
    for split in SPLITS:
        for shard in splits[split]:
            if not isinstance(shard, dict):
                return f"a {split} shard is not an object"
            name = shard.get("file")
            if not isinstance(name, str) or not name or Path(name).name != name:
                return f"a {split} shard's file must be a file name, got {name!r:.40}"
            if not whole(shard.get("tokens"), 0) or not isinstance(shard.get("sha256"), str):
                return f"{name} needs tokens (a whole number) and sha256"
    return None


SPLITS = ("train", "val")


def check_folder(folder: Path, seq_len: int, field: str = "data_dir") -> dict:
    """What every rank checks when it opens the folder, less the SHA-256 (the ranks hash the
    shards): the manifest, each shard's size, a window of ``seq_len + 1`` tokens in each split.
    Run by the CLIs before anything starts, so a bad folder is one line there, not the same
    failure in every generation until --max-failures. Returns the manifest."""
    manifest = read_manifest(folder, field)
    dtype = np.dtype(manifest["dtype"])
    for split in SPLITS:
        tokens = 0
        for shard in manifest["splits"][split]:
            _check_size(Path(folder) / shard["file"], shard["tokens"] * dtype.itemsize, field)
            tokens += shard["tokens"]
        if not any(s["tokens"] > seq_len for s in manifest["splits"][split]):
            raise _no_window(split, tokens, seq_len, field)
    return manifest


def _no_window(split: str, tokens: int, seq_len: int, field: str) -> DataError:
    return DataError(
        f"the {split} split ({tokens} tokens) has no window of {seq_len + 1} tokens; use a "
        "shorter sequence or more text",
        field=field,
    )


def _check_size(path: Path, expected: int, field: str) -> None:
    size = path.stat().st_size if path.is_file() else None
    if size is None:
        raise DataError(f"{path} is missing; prepare the folder again", field=field)
    if size != expected:
        raise DataError(
            f"{path} holds {size} bytes, the manifest says {expected}; prepare the folder again",
            field=field,
        )


class TokenShards:
    """One split (``train`` or ``val``) of a prepared folder as seeded, resumable samples."""

    def __init__(
        self, folder: str | Path, split: str, seq_len: int, seed: int = 0, verify: bool = True
    ) -> None:
        folder = Path(folder)
        self.manifest = read_manifest(folder)
        self.vocab_size = int(self.manifest["vocab_size"])
        self.seq_len = seq_len
        dtype = np.dtype(self.manifest["dtype"]).newbyteorder("<")
        self._shards = [_open(folder, s, dtype, verify) for s in self.manifest["splits"][split]]
        per_shard = [len(s) // (seq_len + 1) for s in self._shards]
        self._starts = list(np.cumsum([0] + per_shard))  # first window id of each shard
        self.num_windows = int(self._starts[-1])
        if self.num_windows < 1:
            raise _no_window(split, sum(len(s) for s in self._shards), seq_len, "seq_len")
        self.order = EpochOrder(self.num_windows, seed)

    def window_tokens(self, window: int) -> torch.Tensor:
        shard = bisect.bisect_right(self._starts, window) - 1
        start = (window - self._starts[shard]) * (self.seq_len + 1)
        chunk = self._shards[shard][start : start + self.seq_len + 1]
        return torch.from_numpy(chunk.astype(np.int64))

    def sample(self, n: int) -> torch.Tensor:
        """Global sample ``n``: ``seq_len + 1`` token ids."""
        return self.window_tokens(self.order.window(n))

    def batch(self, first: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Samples ``first .. first+count-1`` as (inputs, labels), each ``[count, seq_len]``."""
        rows = torch.stack([self.sample(n) for n in range(first, first + count)])
        return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()

    def sample_ids(self, first: int, count: int) -> list[int]:
        return [self.order.window(n) for n in range(first, first + count)]


def _open(folder: Path, shard: dict, dtype: np.dtype, verify: bool) -> np.ndarray:
    path = folder / shard["file"]
    _check_size(path, shard["tokens"] * dtype.itemsize, "data_dir")  # "holds None bytes" before
    if verify and sha256_file(path) != shard["sha256"]:
        raise DataError(
            f"{path} does not match its SHA-256 in the manifest; prepare the folder again",
            field="data_dir",
        )
    return np.memmap(path, dtype=dtype, mode="r")
