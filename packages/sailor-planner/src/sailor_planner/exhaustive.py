"""Exhaustive enumeration of the planner's search space, for instances small enough to list.

The space (the same the planner searches): any pipeline depth P; any contiguous split of the
layer ids into P stages; per GPU type, any number of pipelines, one microbatch size and any TP
degree per stage (within a node, dividing the model); any number of microbatches per pipeline
that adds up to the global batch. Every pipeline runs on one GPU type; each GPU type must sit in
one zone (placement is then unique). Every plan is scored with ``Simulator.estimate``; the best
that fits and respects the constraints wins. Used by the tests to check that the planner is
optimal on small instances, and by the bench.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from sailor_sim import Inventory, Job, Plan, Replica, SailorSimError, Stage

from .errors import RequestError
from .request import SearchOptions
from .result import RankedPlan

MAX_PLANS = 500_000


def _splits(n: int, p: int) -> Iterator[tuple[tuple[int, int], ...]]:
    for cuts in itertools.combinations(range(1, n), p - 1):
        starts = (0, *cuts)
        ends = (*[c - 1 for c in cuts], n - 1)
        yield tuple(zip(starts, ends, strict=True))


def _loads(total: int, pipes: list[int]) -> Iterator[tuple[int, ...]]:
    """Microbatch counts (>= 1) per pipeline with sum(mbs_j * M_j) == total; pipelines of one
    class are interchangeable, so counts are non-increasing within a run of equal mbs."""
    if not pipes:
        if total == 0:
            yield ()
        return
    m, rest = pipes[0], pipes[1:]
    same_next = bool(rest) and rest[0] == m
    for count in range(total // m, 0, -1):
        for tail in _loads(total - count * m, rest):
            if same_next and tail[0] > count:
                continue
            yield (count, *tail)


def enumerate_plans(job: Job, inventory: Inventory, options: SearchOptions) -> Iterator[Plan]:
    model = job.model
    n = model.num_layer_ids
    zone_of: dict[str, str] = {}
    count_of: dict[str, int] = {}
    for pool in inventory.pools:
        if pool.gpu_type in zone_of:
            raise RequestError(
                f"{pool.gpu_type} sits in several zones; the enumerator needs one zone per type",
                field="inventory",
            )
        zone_of[pool.gpu_type], count_of[pool.gpu_type] = pool.zone, pool.count
    from sailor_sim import get_gpu

    types = [g for g in sorted(zone_of) if get_gpu(g).supports(job.dtype)]
    total = sum(count_of[g] for g in types)
    mbs_options = [m for m in options.microbatch_sizes if m <= job.sample_slots]
    for p in range(1, min(n, options.max_pipeline_depth, total) + 1):
        per_type = {}
        for g in types:
            degrees = model.tp_degrees(get_gpu(g).gpus_per_node)
            choices = [None]
            for tps in itertools.product(degrees, repeat=p):
                for d in range(1, count_of[g] // sum(tps) + 1):
                    choices += [(d, m, tps) for m in mbs_options]
            per_type[g] = choices
        for bounds in _splits(n, p):
            for combo in itertools.product(*(per_type[g] for g in types)):
                used = [(g, c) for g, c in zip(types, combo, strict=True) if c is not None]
                if not used:
                    continue
                pipes = [(g, m, tps) for g, (d, m, tps) in used for _ in range(d)]
                for loads in _loads(job.sample_slots, [m for _, m, _ in pipes]):
                    stages = []
                    for i, (a, b) in enumerate(bounds):
                        reps = tuple(
                            Replica(g, zone_of[g], tps[i], m, count)
                            for (g, m, tps), count in zip(pipes, loads, strict=True)
                        )
                        stages.append(Stage(a, b, reps))
                    yield Plan(tuple(stages))


def exhaustive_best(
    sim, job: Job, inventory: Inventory, options: SearchOptions
) -> tuple[RankedPlan | None, int]:
    """(best plan with its estimate, number of plans scored)."""
    best, best_key, scored = None, None, 0
    for plan in enumerate_plans(job, inventory, options):
        scored += 1
        if scored > MAX_PLANS:
            raise RequestError(
                f"more than {MAX_PLANS} plans; not a small instance", field="inventory"
            )
        try:
            est = sim.estimate(job, plan)
        except SailorSimError:
            continue
        if not est.fits or not options.constraints.admits(
            est.throughput_iters_per_s, est.cost_per_iteration_usd, est.cost_per_hour_usd
        ):
            continue
        if options.objective == "cost":
            key = (est.cost_per_iteration_usd, -est.throughput_iters_per_s)
        else:
            key = (-est.throughput_iters_per_s, est.cost_per_iteration_usd)
        if best_key is None or key < best_key:
            best, best_key = RankedPlan(plan, est), key
    return best, scored
