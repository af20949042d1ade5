"""The controller's link to the planner server: live inventory in, best plan out.

The planner may be down (restarted, upgraded); `plan` retries UNAVAILABLE / DEADLINE_EXCEEDED
with backoff until it answers or `wait_s` runs out, so a planner restart mid-run only delays a
re-plan. It gives up early when `should_abort()` turns true (a newer membership change).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from sailor_planner.proto import planner_pb2, planner_pb2_grpc
from sailor_sim import Inventory, Job, Plan
from sailor_sim.proto import job_pb2

from ..errors import PlannerUnavailableError
from .membership import Worker

log = logging.getLogger("sailor.controller")
_RETRY = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def live_inventory(workers: list[Worker]) -> Inventory:
    counts: dict[tuple[str, str], int] = {}
    for w in workers:
        key = (w.gpus.gpu_type, w.gpus.zone)
        counts[key] = counts.get(key, 0) + w.gpus.count
    return Inventory.of(counts)


def inventory_proto(inv: Inventory):
    return job_pb2.Inventory(
        pools=[job_pb2.GpuPool(gpu_type=p.gpu_type, zone=p.zone, count=p.count) for p in inv.pools]
    )


def describe_inventory(inv: Inventory) -> str:
    return ", ".join(f"{p.gpu_type}@{p.zone}={p.count}" for p in inv.pools)


@dataclass(frozen=True)
class PlannedRun:
    plan: Plan
    predicted_iteration_s: float


class PlannerLink:
    def __init__(
        self,
        address: str,
        *,
        profile_dir: str = "",
        objective: str = "throughput",
        call_timeout_s: float = 30.0,
        wait_s: float = 300.0,
    ) -> None:
        self.address = address
        self.profile_dir = profile_dir
        self.objective = (
            planner_pb2.OBJECTIVE_COST if objective == "cost" else planner_pb2.OBJECTIVE_THROUGHPUT
        )
        self.call_timeout_s = call_timeout_s
        self.wait_s = wait_s
        self._channel = grpc.insecure_channel(address)
        self._stub = planner_pb2_grpc.PlannerServiceStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def _call(self, fn, request, should_abort: Callable[[], bool]):
        deadline = time.monotonic() + self.wait_s
        delay = 0.2
        while True:
            try:
                return fn(request, timeout=self.call_timeout_s, wait_for_ready=False)
            except grpc.RpcError as exc:
                if exc.code() not in _RETRY:
                    raise PlannerUnavailableError(
                        f"planner at {self.address} refused: {exc.details()}", field="planner"
                    ) from None
                if time.monotonic() > deadline:
                    raise PlannerUnavailableError(
                        f"planner at {self.address} unreachable for {self.wait_s:.0f} s",
                        field="planner",
                    ) from None
                if should_abort():
                    raise PlannerUnavailableError("re-plan superseded", field="planner") from None
                log.warning("planner unavailable (%s); retrying in %.1f s", exc.code(), delay)
                time.sleep(delay)
                delay = min(2.0, delay * 2)

    def plan(
        self, job: Job, inventory: Inventory, should_abort: Callable[[], bool] = lambda: False
    ) -> PlannedRun:
        """The best plan for ``job`` on ``inventory`` (a fresh search: the live inventory is
        what matters, and Plan is the planner's most-tested call)."""
        request = planner_pb2.PlanRequest(
            job=job.to_proto(),
            inventory=inventory_proto(inventory),
            objective=self.objective,
            top_k=1,
            profile_dir=self.profile_dir,
        )
        reply = self._call(self._stub.Plan, request, should_abort)
        if not reply.plans:
            raise PlannerUnavailableError(
                f"no plan fits {describe_inventory(inventory)}", field="planner"
            )
        best = reply.plans[0]
        return PlannedRun(Plan.from_proto(best.plan).check(job), best.estimate.iteration_time_s)

    def simulate(self, job: Job, plan: Plan) -> float:
        """The simulator's iteration time for ``plan`` (seconds)."""
        reply = self._call(
            self._stub.Simulate,
            planner_pb2.SimulateRequest(
                job=job.to_proto(), plan=plan.to_proto(), profile_dir=self.profile_dir
            ),
            lambda: False,
        )
        return reply.estimate.iteration_time_s
