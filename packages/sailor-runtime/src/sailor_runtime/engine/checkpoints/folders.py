"""Checkpoint folders as the controller and the ranks both read them, without torch: which
step folders exist, which are complete and intact (their manifest, written last, lists files
that all exist with their sizes and hashes), the newest usable one. The controller asks at
start and at every re-plan; importing torch for that cost its process ~4 s CPU per run
(``checkpoint.py`` holds the DCP save and load, and re-exports these)."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

from . import integrity

FORMAT = "sailor-ckpt-v2-dcp"
log = logging.getLogger("sailor.checkpoint")


def step_dir(root: Path, step: int) -> Path:
    return Path(root) / f"step_{step:08d}"


def remove_step(step_folder: Path) -> None:
    """Delete a checkpoint folder: renamed out of sight first (a ``.tmp`` name, which readers
    skip), so no reader sees it half deleted and warns that it is damaged."""
    gone = step_folder.with_name(f"{step_folder.name}.removed.tmp")
    try:
        os.rename(step_folder, gone)
    except OSError:
        gone = step_folder
    shutil.rmtree(gone, ignore_errors=True)


def remove_partial(root: str | Path) -> None:
    """Delete ``*.tmp`` leftovers of interrupted saves (rank 0, before training)."""
    root = Path(root)
    if root.is_dir():
        for p in root.glob("step_*.tmp"):
            shutil.rmtree(p, ignore_errors=True)


def manifest_problem(path: Path) -> tuple[dict | None, str]:
    """(manifest, "") of a complete checkpoint folder, or (None, why it is not usable)."""
    try:
        manifest = json.loads((path / "manifest.json").read_text())
    except FileNotFoundError:
        return None, "it has no manifest.json (a damaged folder: saves write it before the rename)"
    except (OSError, ValueError) as exc:
        return None, f"its manifest.json is unreadable or not JSON ({str(exc)[:80]})"
    if not isinstance(manifest, dict):
        return None, "its manifest.json is not a JSON object"
    if manifest.get("format") != FORMAT:
        return None, (
            f"its format is {manifest.get('format')!r}, this engine reads {FORMAT!r} (a "
            "checkpoint written before torch.distributed.checkpoint)"
        )
    files = manifest.get("files")
    problem = "its manifest lists no files" if not isinstance(files, dict) or not files else None
    problem = problem or integrity.verify(path, files)
    return (None, problem) if problem else (manifest, "")


_warned: set[tuple[str, str]] = set()
"""(folder, problem) already logged by this process: one warning per bad checkpoint, however
often the folder is scanned (the controller looks at every re-plan)."""


def read_manifest(path: Path) -> dict | None:
    """The manifest of a complete checkpoint directory, or None if it is not usable (logged
    once, with the file at fault)."""
    manifest, problem = manifest_problem(path)
    if problem and (str(path), problem) not in _warned:
        _warned.add((str(path), problem))
        log.warning("checkpoint %s skipped: %s; trying the next older one", path, problem)
    return manifest


def complete_dirs(root: str | Path) -> list[Path]:
    """The step folders under ``root`` that claim to be checkpoints (not ``.tmp``), oldest
    first."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(p for p in root.glob("step_*") if not p.name.endswith(".tmp"))


def latest(root: str | Path) -> tuple[Path, dict] | None:
    """The newest valid checkpoint under ``root`` (and its manifest), or None."""
    for p in reversed(complete_dirs(root)):
        manifest = read_manifest(p)
        if manifest is not None:
            return p, manifest
    return None
