"""Durable file replacement, shared by the run folder, the checkpoint fence and the checkpoints."""

from __future__ import annotations

import os
from pathlib import Path


def durable_write(path: Path, data: bytes, tmp: Path | None = None) -> None:
    """Replace ``path`` with ``data`` atomically and durably: write a temporary file beside it
    (``tmp``, default ``<name>.part``), fsync it, rename it over ``path``. A crash leaves either
    the old file or the new one, never half of either."""
    tmp = tmp or path.with_name(path.name + ".part")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def fsync_path(path: Path) -> None:
    """Flush a file's bytes, or a folder's names (a rename or a new file in it), to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
