"""Re-planning policies a trace replay compares, all on the same planner and simulator.

- ``sailor``: re-plan (warm: the previous plan seeds the search) at every change of availability;
  while its plan still runs, switch only when the new plan pays for the switch (``pays_off``)
  within the expected time to the next change (the mean of the changes seen so far).
- ``static``: the plan chosen at the start, kept; when its GPUs are gone the run stops, and it
  resumes once they are all back (no re-plan).
- ``single-type``: the best plan on one GPU type (Sailor's search restricted to each type's pools
  in turn, the best kept), re-planned at every change like ``sailor``: a homogeneous scheduler.
- ``replan-on-loss``: keeps its plan while the plan's GPUs are there; re-plans only when it lost
  some (or when stopped and availability changed); joins are ignored.

Plans are cached per (policy family, inventory): the search is deterministic, so the same
availability gives the same plan; the measured search time of the first search is what a replay
charges for the plan phase every time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from sailor_sim import Inventory, Job, Plan

from ..errors import NoFeasiblePlanError
from ..request import SearchOptions
from ..result import RankedPlan

POLICIES = ("sailor", "static", "single-type", "replan-on-loss")
"""The policies a replay compares by default."""
EVERY_CHANGE = "every-change"
"""What sailor-runtime's controller does today: re-plan and restart at every change, even when
the plan stays the same (the local elastic run is compared with this one)."""
KNOWN_POLICIES = (*POLICIES, EVERY_CHANGE)
WEIGHS_SWITCH = ("sailor", "single-type")
"""Policies that keep a running plan when switching would not pay off."""


@dataclass(frozen=True)
class Decision:
    """What a policy runs in a state: a plan (None = stopped) and whether it searched."""

    plan: RankedPlan | None
    searched: bool
    search_s: float = 0.0


def fits(plan: Plan, inventory: Inventory) -> bool:
    return all(inventory.count(g, z) >= n for (g, z), n in plan.gpu_counts().items())


def _key(plan: RankedPlan | None) -> str:
    return "" if plan is None else plan.plan.to_json(indent=None)


def same_plan(a: RankedPlan | None, b: RankedPlan | None) -> bool:
    return _key(a) == _key(b)


class PlanCache:
    """Plans per (family, inventory), with the search time of their first search."""

    def __init__(
        self,
        planner,
        job: Job,
        options: SearchOptions,
        should_stop: Callable[[], bool] | None = None,
    ) -> None:
        # The replay trains every plan under the job's own execution options, as the runtime
        # runs them (it does not adopt a RankedPlan's options), so it never searches options.
        options = dataclasses.replace(options, search_execution_options=False)
        self.planner, self.job, self.options = planner, job, options
        self.should_stop = should_stop
        """Passed to every search: True (the caller went away) ends it at once."""
        self._plans: dict[tuple[str, Inventory], tuple[RankedPlan | None, float]] = {}

    def best(
        self, inventory: Inventory, previous: RankedPlan | None
    ) -> tuple[RankedPlan | None, float]:
        """Sailor's best plan on ``inventory`` (warm re-plan from ``previous``)."""
        key = ("all", inventory)
        if key not in self._plans:
            self._plans[key] = self._search(inventory, previous)
        return self._plans[key]

    def best_single_type(self, inventory: Inventory) -> tuple[RankedPlan | None, float]:
        """The best plan that uses one GPU type only."""
        key = ("single", inventory)
        if key not in self._plans:
            best, total_s = None, 0.0
            for gpu_type in inventory.gpu_types:
                pools = [p for p in inventory.pools if p.gpu_type == gpu_type]
                found, search_s = self._search(Inventory(tuple(pools)), None)
                total_s += search_s
                if found is not None and (best is None or self._better(found, best)):
                    best = found
            self._plans[key] = (best, total_s)
        return self._plans[key]

    def _search(self, inventory: Inventory, previous: RankedPlan | None):
        if inventory.total_gpus == 0:
            return None, 0.0
        try:
            result = self.planner.plan(
                self.job,
                inventory,
                self.options,
                previous=previous.plan if previous else None,
                should_stop=self.should_stop,
            )
        except NoFeasiblePlanError:
            return None, 0.0
        return result.best, result.search_time_s

    def _better(self, a: RankedPlan, b: RankedPlan) -> bool:
        ea, eb = a.estimate, b.estimate
        if self.options.objective == "cost":
            return (ea.cost_per_iteration_usd, -ea.throughput_iters_per_s) < (
                eb.cost_per_iteration_usd,
                -eb.throughput_iters_per_s,
            )
        return (-ea.throughput_iters_per_s, ea.cost_per_iteration_usd) < (
            -eb.throughput_iters_per_s,
            eb.cost_per_iteration_usd,
        )


class Policy:
    """Decides the plan of each state; ``first`` for the trace's first state."""

    def __init__(self, name: str, cache: PlanCache) -> None:
        if name not in KNOWN_POLICIES:
            from ..errors import RequestError

            raise RequestError(
                f"unknown policy {name!r}; use some of {', '.join(KNOWN_POLICIES)}",
                field="policies",
            )
        self.name, self.cache = name, cache
        self.initial: RankedPlan | None = None

    def decide(
        self, inventory: Inventory, current: RankedPlan | None, changed: bool, first: bool
    ) -> Decision:
        if first:
            decision = self._search(inventory, None)
            self.initial = decision.plan
            return decision
        if not changed:
            return Decision(current, False)
        if self.name == "static":
            keep = self.initial if self.initial and fits(self.initial.plan, inventory) else None
            return Decision(keep, False)
        if self.name == "replan-on-loss" and current is not None and fits(current.plan, inventory):
            return Decision(current, False)
        return self._search(inventory, current)

    def _search(self, inventory: Inventory, current: RankedPlan | None) -> Decision:
        if self.name == "single-type":
            plan, search_s = self.cache.best_single_type(inventory)
        else:
            plan, search_s = self.cache.best(inventory, current)
        return Decision(plan, True, search_s)


def pays_off(
    objective: str,
    current: tuple[float, float],
    new: tuple[float, float],
    horizon_s: float,
    down_s: float,
    lost_samples: float,
) -> bool:
    """Is switching from ``current`` to ``new`` (each (samples/s, $/hour)) worth it over the
    next ``horizon_s``, given the switch stops training ``down_s`` and loses ``lost_samples``?
    Throughput: more samples by the horizon. Cost: fewer dollars per sample by the horizon."""
    (cur_rate, cur_usd_h), (new_rate, new_usd_h) = current, new
    cur_samples = cur_rate * horizon_s
    new_samples = new_rate * max(0.0, horizon_s - down_s) - lost_samples
    if new_samples <= 0:
        return False
    if objective == "cost":
        return new_usd_h / new_samples < cur_usd_h / max(cur_samples, 1e-12)
    return new_samples > cur_samples
