"""Find the last complete checkpoint the engine wrote (the step training resumes after)."""

from __future__ import annotations

from pathlib import Path

from ..engine.checkpoints import folders
from ..errors import SailorRuntimeError


class UnusableCheckpointsError(SailorRuntimeError):
    """Checkpoints exist but none can be loaded: starting from step 0 would train over them."""


def latest_checkpoint_step(directory: str | Path) -> int:
    """Global step of the newest valid checkpoint in ``directory``; 0 when there is none.

    Uses the engine's own reader (a step folder counts only once its manifest, written last,
    lists files that all exist with their sizes), so the controller and the ranks agree on
    where training resumes.
    """
    found = folders.latest(Path(directory))
    return int(found[1].get("step", 0)) if found else 0


def resume_step(directory: str | Path) -> int:
    """The step a run in ``directory`` resumes after (0: no checkpoint, a fresh start). Each
    damaged checkpoint is logged once; when there are checkpoints but none is usable, the run
    is refused rather than silently restarted from step 0 (it would overwrite them)."""
    directory = Path(directory)
    found = folders.latest(directory)
    if found is not None:
        return int(found[1].get("step", 0))
    damaged = folders.complete_dirs(directory)
    if damaged:
        raise UnusableCheckpointsError(
            f"none of the {len(damaged)} checkpoints in {directory} is usable (see the warnings "
            f"above); restore a good one, or move them away (mv {directory} "
            f"{directory}.damaged) to train from step 0",
            field="--run-dir",
        )
    return 0


def already_trained(step: int, steps: int, directory: str | Path) -> str:
    """The line that says a run has nothing to train: its checkpoint is at or past --steps."""
    where = "already at" if step == steps else "already past"
    return (
        f"nothing to train: the checkpoint in {directory} is at step {step}, {where} --steps "
        f"{steps}; give --steps above {step} to train on"
    )
