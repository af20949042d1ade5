"""The Python client of the planner gRPC service, speaking sailor-sim's types.

Calls wait for the server to be ready (``wait_for_ready``) up to their deadline, and the
channel's service config retries a call that fails UNAVAILABLE (the server restarting) with
exponential backoff; nothing here loops by hand. ``abort`` lets a caller that waits on a planner
which is down give up early (the controller does when a newer membership change arrives).
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sailor_sim import (
    ExecutionOptions,
    Inventory,
    Job,
    Plan,
    SailorSimError,
    inputs,
    options_from_proto,
)

from ..errors import CallAbortedError, RequestError
from ..proto import planner_pb2, planner_pb2_grpc
from ..request import MAX_PARETO_POINTS, MAX_PIPELINE_DEPTH, MAX_TOP_K
from .access import client_channel

if TYPE_CHECKING:  # the replay (polars) loads only when a replay is asked for
    from ..replay.request import ReplayRequest
    from ..replay.run import EventResult, PolicySummary

_OBJECTIVE = {"throughput": planner_pb2.OBJECTIVE_THROUGHPUT, "cost": planner_pb2.OBJECTIVE_COST}
SERVICE = "sailor.v1.PlannerService"
RETRY_POLICY = {
    "maxAttempts": 5,
    "initialBackoff": "0.2s",
    "maxBackoff": "2s",
    "backoffMultiplier": 2,
    "retryableStatusCodes": ["UNAVAILABLE"],
}
"""gRPC's own retries (https://grpc.io/docs/guides/retry/): a call that fails UNAVAILABLE is
sent again after 0.2, 0.4, 0.8, 1.6 s; each call's deadline still bounds the whole."""
ABORT_POLL_S = 0.1


def channel_options() -> list[tuple[str, Any]]:
    config = {"methodConfig": [{"name": [{"service": SERVICE}], "retryPolicy": RETRY_POLICY}]}
    return [
        ("grpc.enable_retries", 1),
        ("grpc.service_config", json.dumps(config)),
        # No cap on what the planner answers: each ranked plan's estimate lists every replica's
        # memory (~70 kB for a 1024-GPU plan), so top_k=100 on 1024 GPUs is a 7 MB response,
        # and gRPC's default 4 MiB made the client fail RESOURCE_EXHAUSTED ("Received message
        # larger than max") after the whole search, where the CLI printed the 100 plans.
        ("grpc.max_receive_message_length", -1),
    ]


def _seconds(value: Any, field: str = "timeout_s") -> float | None:
    """A call deadline in seconds: None or +inf = none; else a finite number > 0. gRPC failed
    an infinite one DEADLINE_EXCEEDED at once (as NaN and negatives) without calling, and 0
    silently meant the client's default."""
    if value is None or (isinstance(value, float) and value == math.inf):
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise RequestError(
            f"must be a number of seconds > 0 (None or inf: no deadline), got {value!r}",
            field=field,
        )
    return float(value)


_URI_TARGET = re.compile(r"^(unix|unix-abstract|vsock|ipv4|ipv6):|^[a-z][a-z0-9+.-]*://")
"""A gRPC target in URI form (``dns:///host:port``, ``unix:/path``, ``ipv4:...``): passed on
as it is."""


def _target(address: Any) -> str:
    """``address`` as ``HOST:PORT`` (or a gRPC URI target). A typo such as '127.0.0.1' (gRPC
    reads port 443) or '127.0.0.1:70000' was dialed as given: the call waited for the server
    until its deadline (60 s by default) and failed DEADLINE_EXCEEDED naming nothing."""
    if isinstance(address, str) and _URI_TARGET.match(address):
        return address
    try:
        host, port = inputs.address(address, "address")
    except SailorSimError as exc:
        raise RequestError(str(exc).removeprefix("address: "), field="address") from None
    return f"{host}:{port}"


def _count(name: str, value: Any, high: int) -> int:
    """``top_k`` / ``pareto_points`` as the wire takes them (0 or None = the server's default):
    out of range, protobuf raised a bare ValueError ('Value out of range: -1') naming no field."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        raise RequestError(
            f"must be an integer from 0 to {high} (0: the default), got {value!r}", field=name
        )
    return value


@dataclass(frozen=True)
class ClientRankedPlan:
    plan: Plan
    estimate: Any
    """The wire ``sailor.v1.Estimate`` message."""
    options: ExecutionOptions | None = None
    """The execution options the estimate assumes (``RankedPlan.options``): run the plan with
    them, or ask with ``search_execution_options=False`` to keep the job's."""
    metrics: Any = None
    """The wire ``sailor.v1.PlanMetrics``: tokens/s, MFU, provenance, cost per provider."""


@dataclass(frozen=True)
class ClientPlanResult:
    plans: tuple[ClientRankedPlan, ...]
    pareto: tuple[ClientRankedPlan, ...]
    search_time_s: float
    partial: bool
    stats: Any

    @property
    def best(self) -> ClientRankedPlan:
        return self.plans[0]


def _ranked(items) -> tuple[ClientRankedPlan, ...]:
    return tuple(
        ClientRankedPlan(
            Plan.from_proto(r.plan),
            r.estimate,
            options_from_proto(r.options) if r.HasField("options") else None,
            r.metrics if r.HasField("metrics") else None,
        )
        for r in items
    )


class PlannerClient:
    """``PlannerClient("127.0.0.1:PORT").plan(job, inventory, objective="cost")``; ``token``
    is sent with every call (a server started with ``--token``), ``ca`` (a PEM file) turns on
    TLS trusting that CA (a server started with ``--tls-cert``)."""

    def __init__(
        self,
        address: str,
        timeout_s: float | None = 60.0,
        *,
        token: str | None = None,
        ca: str | os.PathLike | None = None,
    ) -> None:
        self.address = _target(address)
        self.timeout_s = _seconds(timeout_s)
        self._channel = client_channel(address, token, ca, channel_options())
        self._stub = planner_pb2_grpc.PlannerServiceStub(self._channel)

    def call(
        self,
        method: str,
        request,
        timeout_s: float | None = None,
        abort: Callable[[], bool] | None = None,
    ):
        """``method`` (Plan, Replan, Simulate) with ``request``: waits for the server to be
        ready and retries UNAVAILABLE within the deadline; raises ``grpc.RpcError``, or
        ``CallAbortedError`` once ``abort()`` turns true while waiting."""
        fn = getattr(self._stub, method)
        timeout = self._timeout(timeout_s)
        if abort is None:
            return fn(request, timeout=timeout, wait_for_ready=True)
        future = fn.future(request, timeout=timeout, wait_for_ready=True)
        while not future.done():
            if abort() and future.cancel():
                raise CallAbortedError(
                    f"call to {self.address} given up by its caller", field="planner"
                )
            time.sleep(ABORT_POLL_S)
        return future.result()

    def _timeout(self, timeout_s: float | None) -> float | None:
        """A call's deadline: its own ``timeout_s``, or the client's when None."""
        return self.timeout_s if timeout_s is None else _seconds(timeout_s)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> PlannerClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @staticmethod
    def request(
        job: Job,
        inventory: Inventory,
        *,
        objective: str = "throughput",
        max_cost_per_iteration: float = 0.0,
        max_cost_per_hour: float = 0.0,
        min_throughput: float = 0.0,
        top_k: int = 1,
        allow_cross_region_data_parallel: bool = False,
        profile_dir: str = "",
        sailor_root: str = "",
        pareto_points: int = 0,
        search_execution_options: bool | None = None,
        profiled_only: bool = False,
        max_pipeline_depth: int = 0,
    ):
        """The wire ``PlanRequest`` (0 / "" / None = unset: the server's default, which is
        SearchOptions' default, as on the CLI). An unknown objective raises RequestError."""
        if objective not in _OBJECTIVE:
            raise RequestError(
                f"unknown objective {objective!r}; use one of {', '.join(_OBJECTIVE)}",
                field="objective",
            )
        return planner_pb2.PlanRequest(
            job=job.to_proto(),
            inventory=inventory.to_proto(),
            search_execution_options=search_execution_options,
            profiled_only=profiled_only,
            objective=_OBJECTIVE[objective],
            max_cost_per_iteration=max_cost_per_iteration,
            max_cost_per_hour=max_cost_per_hour,
            min_throughput=min_throughput,
            top_k=_count("top_k", top_k, MAX_TOP_K),
            allow_cross_region_data_parallel=allow_cross_region_data_parallel,
            profile_dir=profile_dir,
            sailor_root=sailor_root,
            pareto_points=_count("pareto_points", pareto_points, MAX_PARETO_POINTS),
            max_pipeline_depth=_count("max_pipeline_depth", max_pipeline_depth, MAX_PIPELINE_DEPTH),
        )

    def plan(
        self,
        job: Job,
        inventory: Inventory,
        *,
        timeout_s: float | None = None,
        abort: Callable[[], bool] | None = None,
        **kwargs,
    ) -> ClientPlanResult:
        response = self.call("Plan", self.request(job, inventory, **kwargs), timeout_s, abort)
        return self._result(response)

    def replan(
        self,
        job: Job,
        inventory: Inventory,
        previous: Plan,
        *,
        timeout_s: float | None = None,
        **kwargs,
    ) -> ClientPlanResult:
        request = planner_pb2.ReplanRequest(
            request=self.request(job, inventory, **kwargs), previous_plan=previous.to_proto()
        )
        return self._result(self.call("Replan", request, timeout_s))

    def simulate(
        self,
        job: Job,
        plan: Plan,
        *,
        profile_dir: str = "",
        sailor_root: str = "",
        timeout_s: float | None = None,
    ):
        """The wire ``sailor.v1.Estimate`` of one plan."""
        request = planner_pb2.SimulateRequest(
            job=job.to_proto(),
            plan=plan.to_proto(),
            profile_dir=profile_dir,
            sailor_root=sailor_root,
        )
        return self.call("Simulate", request, timeout_s).estimate

    def replay(
        self,
        request: ReplayRequest,
        *,
        profile_dir: str = "",
        sailor_root: str = "",
        timeout_s: float | None = None,
    ) -> Iterator[EventResult | PolicySummary]:
        """The Replay RPC: each policy's ``EventResult`` per state as the server computes it,
        then that policy's ``PolicySummary``. The call waits for the server to be ready, and the
        retry policy resends it while it failed UNAVAILABLE before any message arrived; a bad
        request raises ``grpc.RpcError`` (INVALID_ARGUMENT naming the field) before any event, and
        search options the wire cannot carry raise ``RequestError`` at once."""
        from ..replay.rpc import from_proto

        wire = request.to_proto(profile_dir, sailor_root)
        stream = self._stub.Replay(wire, timeout=self._timeout(timeout_s), wait_for_ready=True)
        return (from_proto(message) for message in stream)

    @staticmethod
    def _result(response) -> ClientPlanResult:
        return ClientPlanResult(
            plans=_ranked(response.plans),
            pareto=_ranked(response.pareto),
            search_time_s=response.search_time_s,
            partial=response.partial,
            stats=response.stats,
        )
