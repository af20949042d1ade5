"""What a trace replay is asked: one frozen value for the CLI, the Replay RPC and the client.

``ReplayRequest`` holds the job, the trace, the search options, the reconfiguration model, the
policies to compare and whether the first plan is already running. ``replay``/``replay_events``
take it; the CLI builds it from its flags, the server from the wire ``sailor.v1.ReplayRequest``
(``from_proto``) and ``PlannerClient.replay`` sends it (``to_proto``). The planner that scores the
plans is not part of it: it is a service built from profiles (``sources.planner_for``), named on
the wire by ``profile_dir``/``sailor_root``.

Over the wire travel the objective and the constraints of the search options (the server uses
its defaults for the other search knobs: ``to_proto`` refuses a request that sets them), every
parameter of the reconfiguration model, the policies and ``started``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from sailor_sim import Job

from ..errors import RequestError
from ..proto import planner_pb2
from ..request import Constraints, SearchOptions, objective_from_wire
from .policies import KNOWN_POLICIES, POLICIES
from .reconfig import ReconfigModel, check_interval
from .trace import AvailabilityTrace, trace_from_rows

_OBJECTIVE_TO_WIRE = {
    "throughput": planner_pb2.OBJECTIVE_THROUGHPUT,
    "cost": planner_pb2.OBJECTIVE_COST,
}


@dataclass(frozen=True)
class ReplayRequest:
    """A replay of ``trace`` for ``job`` under each of ``policies``."""

    job: Job
    trace: AvailabilityTrace
    options: SearchOptions = field(default_factory=SearchOptions)
    """Objective and constraints of every (re-)plan."""
    reconfig: ReconfigModel = field(default_factory=ReconfigModel)
    """What a reconfiguration and a checkpoint cost (every parameter in ``reconfig.py``)."""
    policies: tuple[str, ...] = POLICIES
    started: bool = False
    """The first state's plan is already running when the trace starts (no start-up cost)."""

    def __post_init__(self) -> None:
        unknown = [p for p in self.policies if p not in KNOWN_POLICIES]
        if unknown or not self.policies:
            raise RequestError(
                f"unknown policy {', '.join(unknown) or '(none)'}; use some of "
                f"{', '.join(KNOWN_POLICIES)}",
                field="policies",
            )
        repeated = sorted({p for p in self.policies if self.policies.count(p) > 1})
        if repeated:  # one summary per policy: a repeat would be merged into doubled figures
            raise RequestError(
                f"duplicate {', '.join(repr(p) for p in repeated)}; name each policy once",
                field="policies",
            )

    def to_proto(self, profile_dir: str = "", sailor_root: str = "") -> planner_pb2.ReplayRequest:
        """The wire request; raises ``RequestError`` for search knobs the wire cannot carry."""
        wire = SearchOptions(self.options.objective, self.options.constraints)
        if self.options != wire:
            raise RequestError(
                "only the objective and constraints travel over gRPC; leave the other search "
                "options at their defaults",
                field="options",
            )
        c = self.options.constraints
        return planner_pb2.ReplayRequest(
            job=self.job.to_proto(),
            trace=trace_rows(self.trace),
            objective=_OBJECTIVE_TO_WIRE[self.options.objective],
            min_throughput=c.min_throughput or 0.0,
            max_cost_per_iteration=c.max_cost_per_iteration or 0.0,
            max_cost_per_hour=c.max_cost_per_hour or 0.0,
            policies=list(self.policies),
            reconfig=reconfig_to_proto(self.reconfig),
            started=self.started,
            profile_dir=profile_dir,
            sailor_root=sailor_root,
        )

    @classmethod
    def from_proto(
        cls, msg: planner_pb2.ReplayRequest, prefixed: Callable[[str, Callable], Any]
    ) -> ReplayRequest:
        """Validate the wire request; ``prefixed(where, build)`` names the field on error."""
        if not msg.job.model:
            raise RequestError("is empty; name a catalog model, e.g. OPT-350M", field="job.model")
        job = prefixed("job", lambda: Job.from_proto(msg.job))
        objective = objective_from_wire(msg.objective)
        constraints = prefixed(
            "constraints",
            lambda: Constraints.from_optional(
                msg.max_cost_per_iteration, msg.max_cost_per_hour, msg.min_throughput
            ),
        )
        return cls(
            job=job,
            trace=trace_from_wire(msg.trace, msg.hold_last_s or None),
            options=SearchOptions(objective, constraints),
            reconfig=prefixed("reconfig", lambda: reconfig_from_proto(msg.reconfig)),
            policies=tuple(msg.policies) or POLICIES,
            started=msg.started,
        )


def reconfig_to_proto(model: ReconfigModel) -> planner_pb2.ReconfigParams:
    """Every parameter of the model (None, e.g. ``plan_s`` = measured, stays unset)."""
    values = {f.name: getattr(model, f.name) for f in fields(model)}
    return planner_pb2.ReconfigParams(**{k: v for k, v in values.items() if v is not None})


def reconfig_from_proto(msg: planner_pb2.ReconfigParams) -> ReconfigModel:
    """Unset fields keep the model's defaults; the interval is held to the CLI's least."""
    if msg.HasField("checkpoint_interval_s"):
        check_interval(msg.checkpoint_interval_s, "reconfig.checkpoint_interval_s")
    return ReconfigModel(
        **{f.name: getattr(msg, f.name) for f in fields(ReconfigModel) if msg.HasField(f.name)}
    )


def trace_rows(trace: AvailabilityTrace) -> list[planner_pb2.TraceRow]:
    """The trace as rows of the Sailor format: every pool at every state's start, and a last
    row that closes the trace at its end (so no ``hold_last_s`` is needed)."""
    rows = []
    for state in trace.states:
        lost = {(g, z): n for g, z, n in state.preempted}
        for gpu_type, zone in trace.pools:
            rows.append(
                planner_pb2.TraceRow(
                    timestamp_s=state.start_s,
                    zone=zone,
                    gpu_type=gpu_type,
                    available=state.inventory.count(gpu_type, zone),
                    price=state.price(gpu_type, zone) or 0.0,
                    preempted=lost.get((gpu_type, zone), 0),
                )
            )
    last = trace.states[-1]
    end = last.start_s + last.duration_s
    rows += [
        planner_pb2.TraceRow(
            timestamp_s=end,
            zone=zone,
            gpu_type=gpu_type,
            available=last.inventory.count(gpu_type, zone),
            price=last.price(gpu_type, zone) or 0.0,
        )
        for gpu_type, zone in trace.pools
    ]
    return rows


def trace_from_wire(rows, hold_last_s: float | None = None) -> AvailabilityTrace:
    """A trace from wire ``TraceRow``s, validated like a file (errors name row and column)."""
    return trace_from_rows(
        [
            {
                "timestamp": r.timestamp_s,
                "zone": r.zone,
                "gpu_type": r.gpu_type,
                "available": r.available,
                "price": r.price or None,
                "preempted": r.preempted or None,
            }
            for r in rows
        ],
        "trace",
        hold_last_s,
    )
