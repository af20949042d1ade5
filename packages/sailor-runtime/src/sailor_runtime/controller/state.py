"""Controller states and the record of one re-plan.

States (values mirror controller.proto's ControllerState):

    WAITING ──(enough workers, debounce elapsed)──► RECONFIGURING ──(assignments sent)──► RUNNING
       ▲                                              │  ▲                                 │
       └──(no plan fits the live workers)─────────────┘  └──(join, leave, failure; debounce)┘
    RUNNING ──(every rank of the generation exited 0)──► DONE
    any ──(too many failures, or the planner stays away)──► FAILED

A generation is one assignment of ranks to nodes; every RECONFIGURING → RUNNING transition
starts a new one (generation numbers only grow). Failures are counted apart from joins and
graceful leaves; only failures count against ``max_failures``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

PHASES = ("detect", "debounce", "plan", "place", "stop", "checkpoint", "restart")
"""Re-plan phases in order. detect: last sign of life of the failed node -> failure noticed;
debounce: noticed -> re-plan starts; plan: planner call; place: ranks onto nodes; stop: old
ranks stopped; checkpoint: last checkpoint located; restart: assignments sent -> first step of
the new generation completed (training resumed)."""


class ControllerState(enum.IntEnum):
    WAITING = 1
    RECONFIGURING = 2
    RUNNING = 3
    DONE = 4
    FAILED = 5


@dataclass
class Reconfiguration:
    generation: int
    reason: str
    failure: bool
    phases: dict[str, float] = field(default_factory=dict)
    resumed_from_step: int = 0
    plan_json: str = ""
    inventory: str = ""
    predicted_iteration_s: float = 0.0
    resumed: bool = False
    """True once the new generation completed its first step."""
    noticed_at: float = 0.0
    """time.monotonic() when the first change of this re-plan was noticed."""
    resumed_at: float = 0.0
    """time.monotonic() when the new generation completed its first step."""

    @property
    def total_s(self) -> float:
        return sum(self.phases.values())

    def to_dict(self) -> dict:
        return {
            "generation": self.generation,
            "reason": self.reason,
            "failure": self.failure,
            "phases": dict(self.phases),
            "total_s": self.total_s,
            "resumed_from_step": self.resumed_from_step,
            "resumed": self.resumed,
            "plan": self.plan_json,
            "inventory": self.inventory,
            "predicted_iteration_s": self.predicted_iteration_s,
            "noticed_at": self.noticed_at,
            "resumed_at": self.resumed_at,
        }
