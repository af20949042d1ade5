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
    return manifest


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
            raise DataError(
                f"the {split} split ({sum(len(s) for s in self._shards)} tokens) has no window "
                f"of {seq_len + 1} tokens; use a shorter sequence or more text",
                field="seq_len",
            )
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
    expected = shard["tokens"] * dtype.itemsize
    size = path.stat().st_size if path.is_file() else None
    if size != expected:
        raise DataError(
            f"{path} holds {size} bytes, the manifest says {expected}; prepare the folder again",
            field="data_dir",
        )
    if verify and sha256_file(path) != shard["sha256"]:
        raise DataError(
            f"{path} does not match its SHA-256 in the manifest; prepare the folder again",
            field="data_dir",
        )
    return np.memmap(path, dtype=dtype, mode="r")
