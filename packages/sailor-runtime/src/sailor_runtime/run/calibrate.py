"""The warm-up of `sailor run --local --trace`: what this machine does, measured before the trace.

The replay's prediction for a local trace run needs the figures of the runtime's phases on this
machine, today; each is measured on the first generation, before the trace's first change, and
goes into ``ReconfigModel`` (sailor-planner ``reconfig.py``, where every parameter lives):

- ``stretch``: (run + run-queue wait) / run of the ranks' main threads over the calibration
  window (``run.profile.CpuShare``); it scales this machine's profile for the simulator.
- ``wall_step_s``: wall seconds per trained step over the same window, checkpoint saves
  included. What exceeds the simulator's iteration time is charged as the checkpoint stall
  (``save_bytes_per_s``): the engine saves every ``checkpoint_every`` steps and the simulator
  does not model that, nor the scheduling delays outside a step's timed part.
- ``restart_s``, ``place_stop_s``: the first generation's phases (controller
  ``Reconfiguration.phases``): ranks forked and their first step done, placing and stopping.
  Not its plan phase: the planner server's first answer loads its profiles (6 s measured under
  load, against 0.1-0.3 s for a re-plan), so the replay charges its own measured search time.
- ``boot_s``: an agent's start to its registration (the joining node's ``provision_s``), and
  ``boot_cpu_s``: the CPU seconds that start took (agent + its zygote, ``/proc/PID/stat``). On
  one machine the start runs on the cores the ranks train on, so while it boots the running plan
  loses ``boot_cpu_s / cores`` seconds of training when the cores are all busy
  (``provision_stall_s``); a cloud node boots on its own hardware and costs nothing.
- ``runnable``: processes running or ready to run (``/proc/stat``), averaged over the window:
  the load the prediction assumes. Other work that starts later stretches the run beyond it.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

from .profile import CpuShare

CALIBRATION_S = 10.0
"""Least wall seconds of the calibration window (tick resolution ~0.2 s: a 2 % error)."""
CALIBRATION_CHECKPOINTS = 2
"""Least checkpoint intervals in the window, so the saves' stall is in the measurement."""


@dataclass(frozen=True)
class Calibration:
    """This machine's figures, measured on the first generation before the trace starts."""

    stretch: float
    wall_step_s: float
    restart_s: float
    place_stop_s: float
    boot_s: float
    boot_cpu_s: float
    runnable: float
    cores: int

    @property
    def provision_stall_s(self) -> float:
        """Training seconds a joining agent's start takes from the running plan: its CPU
        seconds spread over the cores, when they are all busy (more runnable than cores)."""
        return self.boot_cpu_s / self.cores if self.runnable >= self.cores else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "provision_stall_s": self.provision_stall_s}


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process (not its children), 0 when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def agent_cpu_seconds(agent_pid: int, rank_pids: set[int]) -> float:
    """CPU seconds of an agent and its helper children (the zygote), ranks excluded."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        pid = int(stat.parent.name)
        if parent == agent_pid and pid not in rank_pids:
            children.append(pid)
    return cpu_seconds(agent_pid) + sum(cpu_seconds(p) for p in children)


class Window:
    """The calibration window: (wall time, trained step, run-queue snapshot) at its start, and
    the load sampled through it."""

    def __init__(self, now: float, step: int, share: CpuShare) -> None:
        self.start, self.step = now, step
        self.share_at_start = dict(share.last)
        self.runnable: list[float] = []

    def long_enough(self, now: float, step: int, checkpoint_every: int) -> bool:
        steps = step - self.step
        return (
            now - self.start >= CALIBRATION_S
            and steps >= CALIBRATION_CHECKPOINTS * max(1, checkpoint_every)
            and len(self.runnable) > 0
        )

    def stretch(self, share: CpuShare) -> float:
        """The ranks' CPU stretch since the window started."""
        since = CpuShare()
        since.first = {p: s for p, s in self.share_at_start.items() if p in share.last}
        since.last = {p: share.last[p] for p in since.first}
        return since.slowdown if since.first else share.slowdown

    def wall_step_s(self, now: float, step: int) -> float:
        return (now - self.start) / max(1, step - self.step)

    def mean_runnable(self) -> float:
        return sum(self.runnable) / len(self.runnable) if self.runnable else 0.0
