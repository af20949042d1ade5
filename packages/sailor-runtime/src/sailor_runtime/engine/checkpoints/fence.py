"""The run fence of checkpoint writes (issue 24, item 3): ranks of a superseded generation never
write into the checkpoint folder.

The controller writes its newest generation to ``CHECKPOINT_DIR/fence`` (atomically) before
any agent hears of that generation. A rank knows its own generation (``TrainConfig.generation``)
and checks the fence before each save starts and again just before the save's rename makes it
a checkpoint; a rank of an older generation (a dead controller's ranks, a node that missed its
Stop) stops with ``SupersededError`` instead. Each save writes into its own
``step_N.gG.tmp``, so two generations saving the same step never share a folder. Generation 0
(a standalone engine run, the tests) is not fenced.
"""

from __future__ import annotations

from pathlib import Path

from ...durable import durable_write
from ..config import EngineError

FENCE_FILE = "fence"


class SupersededError(EngineError):
    """This rank's generation is no longer the run's newest: it must not write."""


def write_fence(checkpoint_dir: str | Path, generation: int) -> None:
    """Record ``generation`` as the only one allowed to write (write, fsync, rename)."""
    folder = Path(checkpoint_dir)
    folder.mkdir(parents=True, exist_ok=True)
    durable_write(folder / FENCE_FILE, str(generation).encode(), folder / f".{FENCE_FILE}.tmp")


def current(checkpoint_dir: str | Path) -> int:
    """The fenced generation (0: no fence written, or unreadable)."""
    try:
        return int((Path(checkpoint_dir) / FENCE_FILE).read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


def check(checkpoint_dir: str | Path, generation: int) -> None:
    """Raise SupersededError unless ``generation`` may write (0 = unfenced)."""
    if generation == 0:
        return
    newest = current(checkpoint_dir)
    if newest != generation:
        raise SupersededError(
            f"generation {generation} is superseded by generation {newest} in {checkpoint_dir}; "
            "this rank stops without writing a checkpoint",
            field="checkpoint_dir",
        )


def tmp_name(step_name: str, generation: int) -> str:
    """The folder one save of ``step_name`` writes into (one per generation; unfenced runs
    keep ``step_N.tmp``)."""
    return f"{step_name}.g{generation}.tmp" if generation else f"{step_name}.tmp"
