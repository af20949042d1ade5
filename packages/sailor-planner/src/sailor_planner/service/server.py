"""The ``sailor.v1.PlannerService`` gRPC server: Plan, Simulate, Replan, health and reflection.

``create_server(address)`` returns ``(server, port)`` without blocking, so tests bind
``127.0.0.1:0`` and read the port back; ``serve()`` runs it until interrupted. Requests run on a
thread pool. Every error is mapped to a status code in one place (``_status_for``); a handler
never lets an exception escape, so a bad request cannot take the server down.

Bounded by construction (``limits.ServerLimits``): inventory size and candidates per request,
searches at once and queued; a search asks ``context.is_active()`` every few milliseconds, so a
cancelled or expired request stops at once and drops what it built. Beyond loopback the server
needs a token (``access``).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from concurrent import futures
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from sailor_sim import Inventory, Job, Plan, SailorSimError, inputs

from ..errors import (
    NoFeasiblePlanError,
    RequestCancelledError,
    RequestError,
    SailorPlannerError,
    WorkLimitError,
)
from ..proto import planner_pb2, planner_pb2_grpc
from ..request import (
    DEFAULT_MAX_PIPELINE_DEPTH,
    Constraints,
    SearchOptions,
    objective_from_wire,
)
from ..sources import planner_for
from .access import Access, check_bind
from .limits import SearchSlots, ServerLimits
from .paths import DataRoots

SERVICE_NAME = planner_pb2.DESCRIPTOR.services_by_name["PlannerService"].full_name
DEFAULT_TOP_K = 1
# Part of the client's deadline kept for re-scoring, serializing and the trip back.
DEADLINE_MARGIN_S = 0.15
DEADLINE_SHARE = 0.7
MAX_MESSAGE_CHARS = 1000
"""Longest status message sent: a message echoing a 3 MB field would exceed the metadata
limit and reach the client as a transport error instead of the status."""

log = logging.getLogger(__name__)


def _status_for(exc: BaseException) -> grpc.StatusCode:
    """The one place that maps errors to gRPC status codes."""
    if isinstance(exc, NoFeasiblePlanError):
        return grpc.StatusCode.FAILED_PRECONDITION
    if isinstance(exc, WorkLimitError):
        return grpc.StatusCode.RESOURCE_EXHAUSTED
    if isinstance(exc, RequestCancelledError):
        return grpc.StatusCode.CANCELLED
    if isinstance(exc, SailorPlannerError | SailorSimError):
        return grpc.StatusCode.INVALID_ARGUMENT
    return grpc.StatusCode.INTERNAL


def _prefixed(where: str, build):
    """Run ``build``; re-raise a validation error with its field prefixed by ``where``."""
    try:
        return build()
    except (SailorSimError, SailorPlannerError) as exc:
        message = str(exc).split(": ", 1)[1] if exc.field else str(exc)
        raise RequestError(message, field=_field_path(where, exc.field or "")) from None


def _field_path(where: str, inner: str) -> str:
    """``inner`` (a field path of the object built) under the request field ``where``. A
    ``Plan`` names its fields ``plan.stages[...]``: under ``previous_plan`` that is
    ``previous_plan.stages[...]``, not ``previous_plan.plan.stages[...]``."""
    if not inner:
        return where
    if inner.startswith(where):
        return inner
    if where.endswith("plan") and (inner == "plan" or inner.startswith("plan.")):
        return where + inner[len("plan") :]
    return f"{where}.{inner}"


def _options(req, context, limits: ServerLimits) -> SearchOptions:
    objective = objective_from_wire(req.objective)
    top_k = req.top_k or DEFAULT_TOP_K  # its limit and pareto_points': SearchOptions
    constraints = _prefixed(
        "constraints",
        lambda: Constraints.from_optional(
            req.max_cost_per_iteration, req.max_cost_per_hour, req.min_throughput
        ),
    )
    remaining = context.time_remaining()
    deadline = None
    if remaining is not None:
        deadline = max(0.01, (remaining - DEADLINE_MARGIN_S) * DEADLINE_SHARE)
    # Unset = SearchOptions' own default (on), the CLI's and PlannerClient's too.
    chosen = {}
    if req.HasField("search_execution_options"):
        chosen["search_execution_options"] = req.search_execution_options
    return SearchOptions(
        objective=objective,
        constraints=constraints,
        top_k=top_k,
        allow_cross_region_data_parallel=req.allow_cross_region_data_parallel,
        deadline_s=deadline,
        pareto_points=req.pareto_points,
        max_candidates=limits.max_candidates,
        profiled_only=req.profiled_only,
        max_pipeline_depth=req.max_pipeline_depth or DEFAULT_MAX_PIPELINE_DEPTH,
        **chosen,
    )


def _job(msg) -> Job:
    if not msg.model:
        raise RequestError("is empty; name a catalog model, e.g. OPT-350M", field="job.model")
    return _prefixed("job", lambda: Job.from_proto(msg))


def _inventory(msg) -> Inventory:
    inventory = _prefixed("inventory", lambda: Inventory.from_proto(msg))
    if inventory.total_gpus == 0:
        raise RequestError("has no GPUs; list at least one pool", field="inventory.pools")
    return inventory


_SHORTENED = " ...(shortened)"


def _short(message: str) -> str:
    """``message`` in at most MAX_MESSAGE_CHARS characters."""
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    return message[: MAX_MESSAGE_CHARS - len(_SHORTENED)] + _SHORTENED


def _check_previous(previous: Plan, job: Job, inventory: Inventory) -> None:
    """A Replan's previous plan runs on pools the inventory lists. It may use more GPUs of a
    pool than are left (a re-plan after a loss: the warm start is dropped when it no longer
    fits), but not a (GPU type, zone) the inventory does not hold at all."""
    _prefixed("previous_plan", lambda: previous.check(job))
    listed = {(p.gpu_type, p.zone) for p in inventory.pools}
    for gpu_type, zone in previous.gpu_counts():
        if (gpu_type, zone) not in listed:
            raise RequestError(
                f"uses {gpu_type} in {zone}, which the inventory does not hold; a previous plan "
                "must run on the inventory's pools (after losing a whole pool, send Plan)",
                field="previous_plan",
            )


def _stop_if(gone) -> None:
    """End a request whose caller cancelled it or whose deadline passed."""
    if gone():
        raise RequestCancelledError("the caller went away", field="request")


class PlannerService(planner_pb2_grpc.PlannerServiceServicer):
    def __init__(self, limits: ServerLimits | None = None, roots: DataRoots | None = None) -> None:
        self.limits = limits or ServerLimits()
        self.slots = SearchSlots(self.limits)
        self.roots = roots or DataRoots()

    def _guard(self, context, handler):
        try:
            return handler()
        except Exception as exc:  # the server must survive any request
            code = _status_for(exc)
            if code == grpc.StatusCode.INTERNAL:
                log.exception("planner request failed")
            context.abort(code, _short(str(exc) or type(exc).__name__))

    def _plan(self, req, context, previous: Plan | None = None):
        req = self.roots.request(req)
        job = _job(req.job)
        inventory = _inventory(req.inventory)
        self.limits.check_inventory(inventory)
        planner = _prefixed(
            "profiles", lambda: planner_for(req.profile_dir or None, req.sailor_root or None)
        )
        if previous is not None:
            _check_previous(previous, job, inventory)
        gone = lambda: not context.is_active()  # noqa: E731 (cancelled, or deadline passed)
        with self.slots.slot(gone):
            options = _options(req, context, self.limits)  # the deadline left after queueing
            result = planner.plan(job, inventory, options, previous=previous, should_stop=gone)
        return result.to_proto(job)

    def Plan(self, request, context):  # noqa: N802 (gRPC method name)
        return self._guard(context, lambda: self._plan(request, context))

    def Replan(self, request, context):  # noqa: N802
        def run():
            previous = None
            if request.HasField("previous_plan") and request.previous_plan.stages:
                previous = _prefixed(
                    "previous_plan", lambda: Plan.from_proto(request.previous_plan)
                )
            return self._plan(request.request, context, previous)

        return self._guard(context, run)

    def Simulate(self, request, context):  # noqa: N802
        gone = lambda: not context.is_active()  # noqa: E731 (cancelled, or deadline passed)

        def run():
            req = self.roots.request(request)
            job = _job(req.job)
            # A large plan is seconds of work: admitted like a search (queued, refused when
            # the queue is full, left when the caller goes away), not on a spare thread.
            large = self.limits.simulate_needs_slot(req.plan)
            with self.slots.slot(gone) if large else contextlib.nullcontext():
                return self._simulate(req, job, gone)

        return self._guard(context, run)

    def _simulate(self, req, job: Job, gone) -> planner_pb2.SimulateResponse:
        plan = _prefixed("plan", lambda: Plan.from_proto(req.plan).check(job))
        self.limits.check_plan(plan)  # as large as an inventory this server plans on
        sim = _prefixed(
            "profiles",
            lambda: planner_for(req.profile_dir or None, req.sailor_root or None).sim,
        )
        _stop_if(gone)
        estimate = _prefixed("plan", lambda: sim.estimate(job, plan))
        _stop_if(gone)  # encoding a large estimate is most of the work: not for nobody
        return planner_pb2.SimulateResponse(estimate=estimate.to_proto())

    def Replay(self, request, context):  # noqa: N802
        """Admitted like Plan: every state's inventory within the limits, one search slot for
        the whole stream (queued or RESOURCE_EXHAUSTED as a search), and stopped at the next
        poll once the caller cancels, its deadline passes or the server stops."""
        from ..replay import rpc as replayrpc  # the replay (polars) loads only when asked for

        planner, replay = self._guard(context, lambda: self._prepare_replay(request))
        gone = lambda: not context.is_active()  # noqa: E731
        slot = self.slots.slot(gone)
        self._guard(context, slot.__enter__)
        try:
            events = replayrpc.stream(planner, replay, gone)
            while (message := self._guard(context, lambda: next(events, None))) is not None:
                yield message
        finally:
            slot.__exit__(None, None, None)

    def _prepare_replay(self, request):
        from ..replay import rpc as replayrpc

        planner, replay = replayrpc.prepare(self.roots.request(request), _prefixed)
        for state in replay.trace.states:
            self.limits.check_inventory(state.inventory)
        return planner, replay


def create_server(
    address: str = "127.0.0.1:0",
    max_workers: int | None = None,
    *,
    limits: ServerLimits | None = None,
    access: Access | None = None,
    roots: DataRoots | None = None,
) -> tuple[grpc.Server, int]:
    """Build and start a server on ``address``; returns (server, bound port).
    ``max_workers`` = searches at once (the ``--workers`` of ``serve``); ``roots``: the
    folders whose files requests may name (default: none)."""
    limits = limits or ServerLimits()
    if max_workers is not None:
        inputs.integral(max_workers, "workers")
        limits = ServerLimits(**{**limits.__dict__, "max_searches": max_workers})
    access = access or Access()
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=limits.threads),
        interceptors=access.interceptors(),
    )
    service = PlannerService(limits, roots)
    planner_pb2_grpc.add_PlannerServiceServicer_to_server(service, server)
    server.planner_service = service  # its slots' load, for tests and the load bench
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    credentials = access.credentials()
    inputs.listenable(address, "--port")
    try:
        if credentials is None:
            port = server.add_insecure_port(address)
        else:
            port = server.add_secure_port(address, credentials)
    except RuntimeError:  # grpc raises instead of returning 0 on some versions
        port = 0
    if port == 0:
        raise RequestError(f"cannot bind {address}", field="address")
    server.start()
    for name in ("", SERVICE_NAME):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return server, port


STOP_GRACE_S = 0.5
"""Seconds running calls get after SIGINT/SIGTERM; then they are cancelled, and a search or a
replay ends at its next poll of the call (every few ms), so the process exits within a second."""


def serve(
    host: str = "127.0.0.1",
    port: int = 0,
    max_workers: int = 2,
    access: Access | None = None,
    roots: DataRoots | None = None,
    port_file: Path | None = None,
) -> int:
    """Run the planner server until SIGINT or SIGTERM; returns that signal's number once the
    server has stopped (the command exits 128 + it, as every Sailor command stopped by a
    signal does: ``inputs.SIGTERM_EXIT``). ``port_file`` gets the bound port once it serves
    (``inputs.write_port_file``; the caller claimed it with ``inputs.claim_port_file``)."""
    access = access or Access()
    # One host check for every Sailor server: a bare IPv6 address gets its brackets ('::1' was
    # sent to gRPC as '::1:0', one address on port 443: a C-core log line and 'cannot bind'),
    # and '' or 'a b' is refused as no host, not told to pass --token.
    host = inputs.host(host, "host")
    port = inputs.port(port, "port")
    inputs.integral(max_workers, "workers")
    check_bind(host, access)
    server, bound = create_server(f"{host}:{port}", max_workers, access=access, roots=roots)
    scheme = "TLS" if access.tls_cert else "plaintext"
    inputs.write_port_file(port_file, bound)
    print(f"sailor-planner serving {SERVICE_NAME} on {host}:{bound} ({scheme})", flush=True)
    stop = threading.Event()
    received: list[int] = []

    def on_signal(signum, _frame) -> None:
        received.append(signum)
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)
    while not stop.wait(0.5):
        pass
    print(shutdown_line(received[0], server.planner_service.slots.load()), flush=True)
    server.stop(grace=STOP_GRACE_S).wait()
    return received[0]


def shutdown_line(signum: int, load: tuple[int, int]) -> str:
    """What the server says when a signal stops it: the operator sees what was cut short."""
    running, queued = load
    n = running + queued
    return (
        f"sailor-planner shutting down ({signal.Signals(signum).name}): {n} "
        f"request{'s' * (n != 1)} in flight ({running} running, {queued} queued), cancelled "
        f"unless done within {STOP_GRACE_S:g} s"
    )
