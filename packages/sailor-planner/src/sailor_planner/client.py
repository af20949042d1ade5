"""A Python client of the planner gRPC service, speaking sailor-sim's types."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc

from sailor_sim import Inventory, Job, Plan

from .proto import planner_pb2, planner_pb2_grpc

_OBJECTIVE = {"throughput": planner_pb2.OBJECTIVE_THROUGHPUT, "cost": planner_pb2.OBJECTIVE_COST}


@dataclass(frozen=True)
class ClientRankedPlan:
    plan: Plan
    estimate: Any
    """The wire ``sailor.v1.Estimate`` message."""


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
    return tuple(ClientRankedPlan(Plan.from_proto(r.plan), r.estimate) for r in items)


class PlannerClient:
    """``PlannerClient("127.0.0.1:PORT").plan(job, inventory, objective="cost")``."""

    def __init__(self, address: str, timeout_s: float | None = 60.0) -> None:
        self.address = address
        self.timeout_s = timeout_s
        self._channel = grpc.insecure_channel(address)
        self._stub = planner_pb2_grpc.PlannerServiceStub(self._channel)

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
    ):
        """The wire ``PlanRequest`` (0 / "" = unset)."""
        return planner_pb2.PlanRequest(
            job=job.to_proto(),
            inventory=inventory.to_proto(),
            objective=_OBJECTIVE.get(objective, planner_pb2.OBJECTIVE_UNSPECIFIED),
            max_cost_per_iteration=max_cost_per_iteration,
            max_cost_per_hour=max_cost_per_hour,
            min_throughput=min_throughput,
            top_k=top_k,
            allow_cross_region_data_parallel=allow_cross_region_data_parallel,
            profile_dir=profile_dir,
            sailor_root=sailor_root,
            pareto_points=pareto_points,
        )

    def plan(
        self, job: Job, inventory: Inventory, *, timeout_s: float | None = None, **kwargs
    ) -> ClientPlanResult:
        response = self._stub.Plan(
            self.request(job, inventory, **kwargs), timeout=timeout_s or self.timeout_s
        )
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
        return self._result(self._stub.Replan(request, timeout=timeout_s or self.timeout_s))

    def simulate(self, job: Job, plan: Plan, *, profile_dir: str = "", sailor_root: str = ""):
        """The wire ``sailor.v1.Estimate`` of one plan."""
        request = planner_pb2.SimulateRequest(
            job=job.to_proto(),
            plan=plan.to_proto(),
            profile_dir=profile_dir,
            sailor_root=sailor_root,
        )
        return self._stub.Simulate(request, timeout=self.timeout_s).estimate

    @staticmethod
    def _result(response) -> ClientPlanResult:
        return ClientPlanResult(
            plans=_ranked(response.plans),
            pareto=_ranked(response.pareto),
            search_time_s=response.search_time_s,
            partial=response.partial,
            stats=response.stats,
        )
