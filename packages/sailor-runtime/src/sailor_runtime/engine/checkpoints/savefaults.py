"""What the ranks do when a checkpoint cannot be written (issue 24: checkpoints under faults).

Saves are collective, so the ranks decide together: before each save starts and after the
last one, ``settle`` waits for the save in flight, reads the run fence, and all-reduces two
flags (this rank's write failed; this rank's generation is superseded). Then every rank takes
the same branch:

- superseded: ``fence.SupersededError`` on every rank (nothing more is written);
- a write failed (a full disk, a read-only or vanished folder): with ``on_save_error`` "stop"
  (the default) every rank raises ``CheckpointWriteError``, one line naming the step, the cause
  and the last complete checkpoint, and exits with ``FATAL_EXIT`` so the controller ends the
  run FAILED at once (a restart would hit the same disk); with "continue" rank 0 prints one
  warning line and training goes on without saving.

The previous checkpoints stay loadable either way: a failed save never got its rename
(``checkpoint``), and its partial folder is removed here (rank 0) to give the space back.
"""

from __future__ import annotations

import errno
import logging
import os
import sys

import torch

from ..config import FATAL_EXIT, ON_SAVE_ERROR, EngineError
from ..parallel.optim import world_sums
from . import checkpoint as ckpt
from . import fence

__all__ = ["FATAL_EXIT", "ON_SAVE_ERROR", "CheckpointWriteError", "settle"]
log = logging.getLogger("sailor.checkpoint")


class CheckpointWriteError(EngineError):
    """A checkpoint could not be written and the run was asked to stop."""


def settle(saver: ckpt.AsyncSaver, policy: str, device, rank: int) -> ckpt.AsyncSaver | None:
    """The saver to keep using, or None (saving is off); raises as described above."""
    error = saver.drain()
    superseded = isinstance(error, fence.SupersededError)
    if not superseded:
        try:
            fence.check(saver.root, saver.generation)
        except fence.SupersededError as exc:
            error, superseded = exc, True
    failed = error is not None and not superseded
    one = torch.ones((), dtype=torch.float64)
    any_failed, any_superseded = world_sums(
        [one if failed else None, one if superseded else None], device
    )
    if any_superseded:
        raise (
            error
            if superseded
            else fence.SupersededError(
                f"generation {saver.generation} is superseded; this rank stops without writing",
                field="checkpoint_dir",
            )
        )
    if not any_failed:
        return saver
    message = _describe(saver, error)
    if rank == 0:
        ckpt.remove_partial(saver.root)
    if policy == "continue":
        if rank == 0:
            print(f"warning: {message}; training continues without saving", file=sys.stderr)
        return None
    raise CheckpointWriteError(
        f"{message}; free space (or fix the folder) and run again to resume from there, or "
        "pass --on-save-error continue to train on without saving",
        field="checkpoint_dir",
    )


def root_cause(error: BaseException) -> BaseException:
    """The OS error under DCP's wrapping (``CheckpointException.failures`` holds each rank's
    (exception, stack) pair), else the error itself."""
    failures = getattr(error, "failures", None)
    if isinstance(failures, dict) and failures:
        first = next(iter(failures.values()))
        error = first[0] if isinstance(first, tuple) else first
    seen = error
    while seen is not None:
        if isinstance(seen, OSError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return error


def _cause(error: BaseException | None, root) -> str:
    if error is None:
        return "failed on another rank"
    error = root_cause(error)
    if isinstance(error, OSError) and error.strerror:
        where = f": {error.filename}" if error.filename else ""
        return f"{error.strerror}{where}"
    said = " ".join(str(error).split())[:300] or type(error).__name__
    if _out_of_space(root):
        # torch's C++ zip writer (torch.save inside DCP) drops errno and raises a bare
        # RuntimeError ("unexpected pos ..."); the folder's free space says what happened
        return f"{os.strerror(errno.ENOSPC)}: {root} ({said})"
    return said


def _out_of_space(root, slack_bytes: int = 1 << 20) -> bool:
    """Whether the file system holding ``root`` has (almost) no space left for this user."""
    try:
        st = os.statvfs(root)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < slack_bytes


def _describe(saver: ckpt.AsyncSaver, error: BaseException | None) -> str:
    cause = _cause(error, saver.root)
    latest = ckpt.latest(saver.root)
    kept = f"the last complete checkpoint is {latest[0]}" if latest else "no checkpoint is kept"
    return f"checkpoint of step {saver.last_step} was not written ({cause}); {kept}"
