"""Baselines the planner is compared with (bench/), scored by the same simulator.

- ``best_single_type``: what a homogeneous planner finds: for each GPU type (and region), the best
  uniform plan on that type alone (even layer split, one TP degree and microbatch size, equal
  microbatches per replica), over pipeline depth, TP, microbatch size and data parallelism.
- ``uniform_all``: Varuna / AMP style: use every GPU of the inventory with an even layer split and
  one TP degree and microbatch size everywhere, pipelines filled from the GPUs in order (so a
  pipeline may mix types and zones), equal microbatches per replica.
Both return the best plan under the request's objective and constraints (None if none fits).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sailor_sim import Inventory, Job, Plan, Replica, SailorSimError, Stage, get_gpu, get_zone

from ..request import SearchOptions
from ..result import RankedPlan
from .partition import even_bounds


@dataclass(frozen=True)
class BaselineResult:
    name: str
    best: RankedPlan | None
    plans_scored: int
    search_time_s: float


def _key(options: SearchOptions, e) -> tuple:
    if options.objective == "cost":
        return (e.cost_per_iteration_usd, -e.throughput_iters_per_s)
    return (-e.throughput_iters_per_s, e.cost_per_iteration_usd)


class _Best:
    def __init__(self, sim, job: Job, options: SearchOptions) -> None:
        self.sim, self.job, self.options = sim, job, options
        self.best: RankedPlan | None = None
        self.scored = 0

    def offer(self, plan: Plan) -> None:
        self.scored += 1
        try:
            e = self.sim.estimate(self.job, plan)
        except SailorSimError:
            return
        c = self.options.constraints
        if not e.fits or not c.admits(
            e.throughput_iters_per_s, e.cost_per_iteration_usd, e.cost_per_hour_usd
        ):
            return
        if self.best is None or _key(self.options, e) < _key(self.options, self.best.estimate):
            self.best = RankedPlan(plan, e)


def _divisors_pow2(n: int) -> list[int]:
    return [d for d in (2**k for k in range(0, 20)) if d <= n and n % d == 0]


def _replica_slots(pools: list[tuple[str, str, int]], tp: int) -> list[tuple[str, str]]:
    """TP groups (type, zone) of ``tp`` GPUs each, in pool order (a group stays in one zone)."""
    slots = []
    for g, z, count in pools:
        slots += [(g, z)] * (count // tp)
    return slots


def _uniform(job, slots, p: int, d: int, tp: int, mbs: int) -> Plan:
    micro = job.sample_slots // (d * mbs)
    bounds = even_bounds(job.model.num_layer_ids, p)
    stages = []
    for i, (a, b) in enumerate(bounds):
        reps = tuple(Replica(g, z, tp, mbs, micro) for g, z in slots[i * d : (i + 1) * d])
        stages.append(Stage(a, b, reps))
    return Plan(tuple(stages))


def best_single_type(sim, job: Job, inventory: Inventory, options: SearchOptions) -> BaselineResult:
    start = time.perf_counter()
    best = _Best(sim, job, options)
    n = job.model.num_layer_ids
    by_type_region: dict[tuple[str, str], list[tuple[str, str, int]]] = {}
    for pool in inventory.pools:
        region = get_zone(pool.zone).region
        by_type_region.setdefault((pool.gpu_type, region), []).append(
            (pool.gpu_type, pool.zone, pool.count)
        )
    for (g, _region), pools in sorted(by_type_region.items()):
        if not get_gpu(g).supports(job.dtype):
            continue
        total = sum(c for _, _, c in pools)
        for tp in job.model.tp_degrees(get_gpu(g).gpus_per_node):
            slots = _replica_slots(sorted(pools, key=lambda x: -x[2]), tp)
            for p in range(1, min(n, options.max_pipeline_depth, total // tp) + 1):
                for mbs in options.microbatch_sizes:
                    if job.sample_slots % mbs:
                        continue
                    for d in _divisors_pow2(job.sample_slots // mbs):
                        if p * d > len(slots):
                            break
                        best.offer(_uniform(job, slots, p, d, tp, mbs))
    return BaselineResult(
        "best single GPU type", best.best, best.scored, time.perf_counter() - start
    )


def uniform_all(sim, job: Job, inventory: Inventory, options: SearchOptions) -> BaselineResult:
    start = time.perf_counter()
    best = _Best(sim, job, options)
    n = job.model.num_layer_ids
    pools = [
        (p.gpu_type, p.zone, p.count)
        for p in inventory.pools
        if get_gpu(p.gpu_type).supports(job.dtype)
    ]
    degrees = sorted(
        set.intersection(
            *(set(job.model.tp_degrees(get_gpu(g).gpus_per_node)) for g, _, _ in pools)
        )
    )
    for tp in degrees:
        slots = _replica_slots(pools, tp)
        for p in range(1, min(n, options.max_pipeline_depth, len(slots)) + 1):
            for mbs in options.microbatch_sizes:
                # As many pipelines as the GPUs allow while replicas share the batch equally.
                d = len(slots) // p
                while d >= 1 and job.sample_slots % (d * mbs):
                    d -= 1
                if d >= 1:
                    best.offer(_uniform(job, slots, p, d, tp, mbs))
    return BaselineResult(
        "all GPUs, uniform split", best.best, best.scored, time.perf_counter() - start
    )
