"""Content hashes of checkpoint files: written into the manifest, checked before a load.

Torch-free and format-free on purpose, so any checkpoint layout (ours, or
torch.distributed.checkpoint's) can reuse it: ``describe(file)`` when a file is final,
``verify(folder, files)`` before trusting a folder. A file whose size is unchanged but whose
bytes are not (a bad disk, a partial copy, a stray write) is caught by its sha256.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

CHUNK = 1 << 20


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def describe(path: Path) -> dict:
    """The manifest entry of a finished file: its size and sha256."""
    return {"size": path.stat().st_size, "sha256": sha256_of(path)}


def verify(folder: Path, files: Mapping[str, object]) -> str | None:
    """None when every listed file exists with its size and hash; else what is wrong, naming
    the file. An entry that is a bare int (older manifests) checks the size only."""
    for name, entry in files.items():
        path = folder / name
        # DCP's own ``.metadata`` is a listed file; only names that leave the folder are not.
        if "/" in name or name in ("", ".", "..") or not path.is_file():
            return f"{name} is missing"
        size, digest = (entry, None) if isinstance(entry, int) else _fields(entry)
        if size is None:
            return f"{name} has a malformed manifest entry"
        actual = path.stat().st_size
        if actual != size:
            return f"{name} has {actual} bytes, the manifest says {size} (truncated?)"
        if digest is not None and sha256_of(path) != digest:
            return f"{name} does not match its sha256 in the manifest (corrupted)"
    return None


def _fields(entry: object) -> tuple[int | None, str | None]:
    if not isinstance(entry, Mapping):
        return None, None
    size, digest = entry.get("size"), entry.get("sha256")
    if not isinstance(size, int) or (digest is not None and not isinstance(digest, str)):
        return None, None
    return size, digest
