"""Find the last complete checkpoint the engine wrote (the step training resumes after)."""

from __future__ import annotations

import re
from pathlib import Path

_STEP_RE = re.compile(r"(\d+)$")


def latest_checkpoint_step(directory: str | Path) -> int:
    """Global step of the newest valid checkpoint in ``directory``; 0 when there is none."""
    try:
        from ..engine import checkpoint as engine_ckpt  # the engine's own reader when present

        finder = getattr(engine_ckpt, "latest_step", None)
        if finder is not None:
            return int(finder(directory) or 0)
    except ImportError:
        pass
    best = 0
    root = Path(directory)
    if not root.is_dir():
        return 0
    for sub in root.iterdir():
        m = _STEP_RE.search(sub.name)
        # A step folder counts only once its manifest exists (written last).
        if m and sub.is_dir() and any(sub.glob("*.json")):
            best = max(best, int(m.group(1)))
    return best
