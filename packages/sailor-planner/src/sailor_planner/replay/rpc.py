"""The Replay RPC of ``sailor.v1.PlannerService``: a trace replay streamed event by event.

Everything in the request is validated before the first message goes out
(``ReplayRequest.from_proto``), so a bad trace or job is one status (INVALID_ARGUMENT, naming
``trace row N, column C`` or the field) and no partial stream; the steps then stream as the
replay computes them, each policy followed by its summary. The messages convert both ways here:
the server sends ``EventResult``/``PolicySummary``, ``PlannerClient.replay`` reads them back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import fields

from sailor_sim import Job

from ..proto import planner_pb2
from ..sources import planner_for
from .request import ReplayRequest
from .run import EventResult, PolicySummary, replay_events, summarize


def prepare(msg, prefixed) -> tuple:
    """(planner, ReplayRequest) from the wire request; ``prefixed(where, build)`` names the
    field on error."""
    request = ReplayRequest.from_proto(msg, prefixed)
    planner = prefixed(
        "profiles", lambda: planner_for(msg.profile_dir or None, msg.sailor_root or None)
    )
    return planner, request


def step_to_proto(e: EventResult) -> planner_pb2.ReplayEvent:
    return planner_pb2.ReplayEvent(step=planner_pb2.ReplayStep(**e.to_dict()))


def summary_to_proto(s: PolicySummary) -> planner_pb2.ReplayEvent:
    values = s.to_dict()
    values["usd_per_million_tokens"] = values["usd_per_million_tokens"] or 0.0
    return planner_pb2.ReplayEvent(summary=planner_pb2.ReplaySummary(**values))


def from_proto(message: planner_pb2.ReplayEvent) -> EventResult | PolicySummary:
    """A streamed message as the replay's own value (a step has no plot segments)."""
    if message.HasField("step"):
        names = [f.name for f in fields(EventResult) if f.name != "segments"]
        return EventResult(**{n: getattr(message.step, n) for n in names})
    values = {f.name: getattr(message.summary, f.name) for f in fields(PolicySummary)}
    values["usd_per_million_tokens"] = values["usd_per_million_tokens"] or None
    return PolicySummary(**values)


def stream(
    planner, request: ReplayRequest, should_stop: Callable[[], bool] | None = None
) -> Iterator[planner_pb2.ReplayEvent]:
    """ReplayEvent messages: each policy's steps as computed, then its summary (``should_stop``:
    see ``replay_events``)."""
    job, duration = request.job, request.trace.duration_s
    events: list[EventResult] = []
    for event in replay_events(planner, request, should_stop):
        if events and event.policy != events[-1].policy:
            yield summary_to_proto(summarize(events[-1].policy, job, events, duration))
            events = []
        events.append(event)
        yield step_to_proto(event)
    if events:
        yield summary_to_proto(summarize(events[-1].policy, job, events, duration))


def request_for(job: Job, rows: list[dict], **fields) -> planner_pb2.ReplayRequest:
    """A wire ReplayRequest from trace rows in the Sailor format (dicts with its column names),
    e.g. to send a trace that does not validate (tests of the server's errors)."""
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
