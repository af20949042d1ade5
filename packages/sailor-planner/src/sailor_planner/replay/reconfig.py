"""What a reconfiguration and a checkpoint cost a run: every parameter of the replay in one place.

The phases are the runtime's (sailor-runtime README, "On every change"): *detect* (a node that
vanished is noticed), *debounce* (the controller waits for the burst of changes to end), *plan*,
*place* + *stop* (old ranks), *checkpoint* (find the newest complete one), *restart* (ranks up,
state restored, first step done). The runtime resumes from the newest complete checkpoint on every
change, so the training done since that checkpoint runs again: the replay counts it as lost.

Defaults and where they come from (runtime figures: sailor-runtime README, "Numbers", printed by
``bench/reconfig_time.py``; the others are assumptions, not measured here):

- ``detect_s`` 0.7 s: a kill -9 noticed (cold ranks), bench/reconfig_time.py.
- ``debounce_s`` 1.0 s: the controller's default window (``ControllerConfig.debounce_s``).
- ``plan_s``: the planner's own search time for that re-plan, measured during the replay.
- ``place_stop_s`` 0.01 s: "plan, place, stop and checkpoint take milliseconds each".
- ``restart_s`` 3.5 s: restart with cold ranks, bench/reconfig_time.py (0.5 s with warm ranks).
- ``restore_bytes_per_s`` 1 GB/s: assumption, reading the checkpoint from shared storage.
- ``save_bytes_per_s`` 1 GB/s: assumption, the training stall of one checkpoint save.
- ``provision_s`` 0 s: assumption, the trace counts nodes ready to join (a cloud VM takes
  minutes to boot; `sailor run --local --trace` measures its agents' start).
- ``provision_stall_s`` 0 s: a cloud node boots on its own hardware; on one machine the
  joining agent's start competes with the ranks for the cores (`sailor run --local --trace`
  measures its CPU seconds, ``run/calibrate.py``).
- ``checkpoint_interval_s`` 1800 s: assumption, the user's choice (``--checkpoint-every`` is
  in steps in ``sailor run``).

Checkpoint size: weights in the job's dtype, plus an fp32 master copy when training in 16 bits,
plus the optimizer's fp32 state (Adam/AdamW: 2 moments; SGD: 1 momentum), per parameter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from sailor_sim import Job, dtype_bytes, inputs

from ..errors import RequestError

MIN_CHECKPOINT_INTERVAL_S = 1.0
"""Least checkpoint interval a replay request takes (CLI ``--checkpoint-interval``, gRPC
``reconfig.checkpoint_interval_s``). Saving a checkpoint stalls training for seconds (OPT-350M's
takes 4.9 s at the replay's assumed 1 GB/s), so a shorter interval only trains in the gaps
between saves: it is a typo (1e-3 for 1e3), and 1e-300 printed 2e302 $ per million tokens.
The model itself (``ReconfigModel``) takes any interval > 0: ``sailor run --local --trace``
replays its measured sub-second steps with it."""


def check_interval(seconds: float, field: str) -> float:
    """A requested checkpoint interval: a finite number of seconds >= MIN_CHECKPOINT_INTERVAL_S;
    errors name ``field`` (the flag or the wire field it came from)."""
    if inputs.positive_number(seconds, field) < MIN_CHECKPOINT_INTERVAL_S:
        raise RequestError(
            f"must be at least {MIN_CHECKPOINT_INTERVAL_S:g} s (a checkpoint takes seconds to "
            f"save), got {seconds:g}",
            field=field,
        )
    return seconds


OPTIMIZER_STATES = {"adam": 2, "adamw": 2, "sgd": 1}
"""fp32 tensors the optimizer keeps per parameter (torch.optim's Adam moments, SGD momentum)."""


@dataclass(frozen=True)
class ReconfigModel:
    """Seconds each phase of a reconfiguration takes, and how checkpoints are taken."""

    detect_s: float = 0.7
    """A loss without notice (failure, spot preemption) is noticed after this long."""
    debounce_s: float = 1.0
    """The controller waits this long without further change before re-planning."""
    place_stop_s: float = 0.01
    """Placing ranks and stopping the old ones."""
    restart_s: float = 3.5
    """Ranks started and first step done, not counting the checkpoint read."""
    restore_bytes_per_s: float = 1e9
    """Checkpoint read bandwidth (the whole checkpoint, once)."""
    save_bytes_per_s: float = 1e9
    """Checkpoint write bandwidth; training stalls for size / this at every checkpoint."""
    checkpoint_interval_s: float = 1800.0
    """Seconds of training between two checkpoints."""
    plan_s: float | None = None
    """Seconds charged for the plan phase; None = the planner's measured search time."""
    provision_s: float = 0.0
    """Seconds from capacity appearing in the trace to its nodes being ready (VM boot, agent
    start); the running plan trains meanwhile. 0 = the trace counts ready nodes."""
    provision_stall_s: float = 0.0
    """Seconds of training the running plan loses while joining nodes start, at most
    ``provision_s``: 0 in the cloud (a new node boots on its own hardware); on one shared
    machine, the CPU seconds of an agent's start over the cores they take them from."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            positive = f.name.endswith("per_s") or f.name == "checkpoint_interval_s"
            if not math.isfinite(value) or value < 0 or (positive and value == 0):
                need = "> 0" if positive else ">= 0"
                raise RequestError(f"must be {need}, got {value}", field=f"reconfig.{f.name}")
        if self.provision_stall_s > self.provision_s:
            raise RequestError(
                f"must be <= provision_s ({self.provision_s}), got {self.provision_stall_s}",
                field="reconfig.provision_stall_s",
            )

    def checkpoint_bytes(self, job: Job) -> int:
        """Bytes of one full checkpoint of ``job`` (weights + master copy + optimizer state)."""
        per_param = dtype_bytes(job.dtype) + 4 * OPTIMIZER_STATES.get(job.optimizer, 2)
        if dtype_bytes(job.dtype) < 4:
            per_param += 4  # fp32 master weights of mixed-precision training
        return job.model.total_params() * per_param

    def save_s(self, job: Job) -> float:
        """Training stall of one checkpoint."""
        return self.checkpoint_bytes(job) / self.save_bytes_per_s

    def restore_s(self, job: Job) -> float:
        return self.checkpoint_bytes(job) / self.restore_bytes_per_s

    @property
    def booting_share(self) -> float:
        """The running plan's share of its throughput while joining nodes start."""
        return 1.0 - self.provision_stall_s / self.provision_s if self.provision_s > 0 else 1.0

    def downtime_s(self, job: Job, plan_s: float, noticed_late: bool) -> float:
        """Training stopped for one reconfiguration: detect (if the loss came without notice),
        debounce, plan, place + stop, restore, restart."""
        detect = self.detect_s if noticed_late else 0.0
        plan = self.plan_s if self.plan_s is not None else plan_s
        return (
            detect
            + self.debounce_s
            + plan
            + self.place_stop_s
            + self.restore_s(job)
            + self.restart_s
        )

    def to_dict(self) -> dict[str, float | None]:
        return {f.name: getattr(self, f.name) for f in fields(self)}
