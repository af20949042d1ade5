"""The controller's link to the planner server: live inventory in, best plan out.

It speaks through ``sailor_planner.service.client.PlannerClient`` (the one planner client): calls
wait
for the planner to be ready and gRPC's retry policy resends those that fail UNAVAILABLE, so a
planner restart mid-run only delays a re-plan, up to ``wait_s``. The wait ends early when
``should_abort()`` turns true (a newer membership change).

The planner ranks plans by the simulator, which models execution options on plans the engine
cannot run them on (ZeRO-3 across replicas of different TP degree, ...): ``unsupported``
(``engine.options.unsupported_reason`` for the run's options) filters the planner's best
``candidates`` plans, and the first the engine runs is the one used.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc

from sailor_planner import CallAbortedError, PlannerClient
from sailor_sim import Inventory, Job, Plan

from ..errors import NoPlanError, PlannerUnavailableError
from .membership import Worker

_WAITED = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def live_inventory(workers: list[Worker]) -> Inventory:
    counts: dict[tuple[str, str], int] = {}
    for w in workers:
        key = (w.gpus.gpu_type, w.gpus.zone)
        counts[key] = counts.get(key, 0) + w.gpus.count
    return Inventory.of(counts)


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
        wait_s: float = 300.0,
        unsupported: Callable[[Plan], str | None] = lambda plan: None,
        candidates: int = 1,
        max_pipeline_depth: int = 0,
        token: str | None = None,
        ca: Path | None = None,
    ) -> None:
        self.address = address
        self.unsupported = unsupported
        self.candidates = candidates
        """Plans asked for per search (more when the options rule some plans out)."""
        self.max_pipeline_depth = max_pipeline_depth
        """Deepest pipeline the planner may search (0: its default; 1 under FSDP)."""
        self.profile_dir = profile_dir
        self.objective = objective
        self.wait_s = wait_s
        self._client = PlannerClient(address, timeout_s=wait_s, token=token, ca=ca)

    def close(self) -> None:
        self._client.close()

    def plan(
        self, job: Job, inventory: Inventory, should_abort: Callable[[], bool] = lambda: False
    ) -> PlannedRun:
        """The best plan for ``job`` on ``inventory`` (a fresh search: the live inventory is
        what matters, and Plan is the planner's most-tested call)."""
        try:
            result = self._client.plan(
                job,
                inventory,
                objective=self.objective,
                profile_dir=self.profile_dir,
                search_execution_options=False,  # the runtime runs the job's own options
                top_k=self.candidates,
                max_pipeline_depth=self.max_pipeline_depth,
                abort=should_abort,
            )
        except CallAbortedError:
            raise PlannerUnavailableError("re-plan superseded", field="planner") from None
        except grpc.RpcError as exc:
            raise self._error(exc) from None
        if not result.plans:
            raise NoPlanError(f"no plan fits {describe_inventory(inventory)}", field="planner")
        return self._first_runnable(job, result.plans)

    def _first_runnable(self, job: Job, plans) -> PlannedRun:
        """The best of the planner's plans that the engine runs with the run's options."""
        reasons = []
        for ranked in plans:
            reason = self.unsupported(ranked.plan)
            if reason is None:
                return PlannedRun(ranked.plan.check(job), ranked.estimate.iteration_time_s)
            reasons.append(reason)
        raise NoPlanError(
            f"none of the planner's {len(plans)} best plans runs on the engine ({reasons[0]})",
            field="options",
        )

    def simulate(self, job: Job, plan: Plan) -> float:
        """The simulator's iteration time for ``plan`` (seconds)."""
        try:
            estimate = self._client.simulate(job, plan, profile_dir=self.profile_dir)
        except grpc.RpcError as exc:
            raise self._error(exc) from None
        return estimate.iteration_time_s

    def _error(self, exc: grpc.RpcError) -> PlannerUnavailableError:
        if exc.code() == grpc.StatusCode.FAILED_PRECONDITION:  # no feasible plan
            return NoPlanError(f"planner at {self.address}: {exc.details()}", field="planner")
        if exc.code() in _WAITED:
            return PlannerUnavailableError(
                f"planner at {self.address} unreachable for {self.wait_s:.0f} s", field="planner"
            )
        return PlannerUnavailableError(
            f"planner at {self.address} refused: {exc.details()}", field="planner"
        )
