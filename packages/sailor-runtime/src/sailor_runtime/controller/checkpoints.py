"""Find the last complete checkpoint the engine wrote (the step training resumes after)."""

from __future__ import annotations

from pathlib import Path


def latest_checkpoint_step(directory: str | Path) -> int:
    """Global step of the newest valid checkpoint in ``directory``; 0 when there is none.

    Uses the engine's own reader (a step folder counts only once its manifest, written last,
    lists files that all exist with their sizes), so the controller and the ranks agree on
    where training resumes.
    """
    from ..engine.checkpoints import checkpoint

    found = checkpoint.latest(Path(directory))
    return int(found[1].get("step", 0)) if found else 0
