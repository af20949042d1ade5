"""The Replay RPC of ``sailor.v1.PlannerService``: a trace replay streamed event by event.

Everything in the request is validated before the first message goes out, so a bad trace or job
is one status (INVALID_ARGUMENT, naming ``trace row N, column C`` or the field) and no partial
stream; the steps then stream as the replay computes them, each policy followed by its summary.
"""

from __future__ import annotations

from collections.abc import Iterator

from sailor_sim import Job

from .errors import RequestError
from .policies import KNOWN_POLICIES, POLICIES
from .proto import planner_pb2
from .reconfig import ReconfigModel
from .replay import EventResult, replay_events, summarize
from .request import Constraints, SearchOptions
from .sources import planner_for
from .trace import AvailabilityTrace, trace_from_rows

_OBJECTIVES = {0: "throughput", 1: "throughput", 2: "cost"}


def _trace(req) -> AvailabilityTrace:
    rows = [
        {
            "timestamp": r.timestamp_s,
            "zone": r.zone,
            "gpu_type": r.gpu_type,
            "available": r.available,
            "price": r.price or None,
            "preempted": r.preempted or None,
        }
        for r in req.trace
    ]
    return trace_from_rows(rows, "trace", req.hold_last_s or None)


def _policies(req) -> tuple[str, ...]:
    names = tuple(req.policies) or POLICIES
    unknown = [p for p in names if p not in KNOWN_POLICIES]
    if unknown:
        raise RequestError(
            f"unknown {', '.join(unknown)}; use some of {', '.join(KNOWN_POLICIES)}",
            field="policies",
        )
    return names


def prepare(req, prefixed) -> tuple:
    """Validate the whole request; ``prefixed(where, build)`` names the field on error."""
    if not req.job.model:
        raise RequestError("is empty; name a catalog model, e.g. OPT-350M", field="job.model")
    job = prefixed("job", lambda: Job.from_proto(req.job))
    if req.objective not in _OBJECTIVES:
        raise RequestError(f"unknown objective {req.objective}", field="objective")
    options = SearchOptions(
        objective=_OBJECTIVES[req.objective],
        constraints=prefixed(
            "constraints",
            lambda: Constraints.from_optional(req.max_cost_per_iteration, None, req.min_throughput),
        ),
    )
    model = prefixed(
        "reconfig",
        lambda: (
            ReconfigModel(checkpoint_interval_s=req.checkpoint_interval_s)
            if req.checkpoint_interval_s
            else ReconfigModel()
        ),
    )
    trace = _trace(req)
    planner = prefixed(
        "profiles", lambda: planner_for(req.profile_dir or None, req.sailor_root or None)
    )
    return planner, job, trace, options, model, _policies(req)


def _step(e: EventResult):
    return planner_pb2.ReplayEvent(step=planner_pb2.ReplayStep(**e.to_dict()))


def _summary(s):
    fields = s.to_dict()
    fields["usd_per_million_tokens"] = fields["usd_per_million_tokens"] or 0.0
    return planner_pb2.ReplayEvent(summary=planner_pb2.ReplaySummary(**fields))


def stream(planner, job, trace, options, model, policies) -> Iterator:
    """ReplayEvent messages: each policy's steps as computed, then its summary."""
    events: list[EventResult] = []
    for event in replay_events(planner, job, trace, options, model, policies):
        if events and event.policy != events[-1].policy:
            yield _summary(summarize(events[-1].policy, job, events, trace.duration_s))
            events = []
        events.append(event)
        yield _step(event)
    if events:
        yield _summary(summarize(events[-1].policy, job, events, trace.duration_s))


def request_for(job: Job, rows: list[dict], **fields) -> planner_pb2.ReplayRequest:
    """A ReplayRequest from trace rows in the Sailor format (dicts with its column names)."""
    trace = [
        planner_pb2.TraceRow(
            timestamp_s=float(r["timestamp"]),
            zone=r["zone"],
            gpu_type=r["gpu_type"],
            available=int(r["available"]),
            price=float(r.get("price") or 0.0),
            preempted=int(r.get("preempted") or 0),
        )
        for r in rows
    ]
    return planner_pb2.ReplayRequest(job=job.to_proto(), trace=trace, **fields)
