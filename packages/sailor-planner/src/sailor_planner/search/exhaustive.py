"""Exhaustive enumeration of the planner's search space, for instances small enough to list.

The space (the same the planner searches): any pipeline depth P; any contiguous split of the
layer ids into P stages; per GPU type, any number of pipelines, one microbatch size and any TP
degree per stage (within a node, dividing the model); any number of microbatches per pipeline
that adds up to the global batch. Every pipeline runs on one GPU type, inside one zone; a type
in several zones has any number of pipelines in each (the planner also places a pipeline
across the zones of a region: its space is a superset). Every plan is scored with
``Simulator.estimate``; the best that fits and respects the constraints wins. Used by the tests
to check that the planner is optimal on small instances, and by the bench.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from sailor_sim import Inventory, Job, Plan, Replica, SailorSimError, Stage

from ..errors import RequestError
from ..request import SearchOptions
from ..result import RankedPlan

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


def enumerate_plans(
    job: Job, inventory: Inventory, options: SearchOptions, uniform_tp: bool = False
) -> Iterator[Plan]:
    """Every plan of the space. A GPU type in several zones keeps one (microbatch size, TP per
    stage) for all its pipelines (one class, as the planner) and any number of pipelines in
    each zone, each pipeline inside one zone (the planner may also split a pipeline across the
    zones of a region: a superset). ``uniform_tp``: one TP degree for all stages of a pipeline
    (a sub-space, for instances too large otherwise)."""
    from sailor_sim import get_gpu

    model = job.model
    n = model.num_layer_ids
    pools: dict[str, list[tuple[str, int]]] = {}
    for pool in inventory.pools:
        pools.setdefault(pool.gpu_type, []).append((pool.zone, pool.count))
    types = [g for g in sorted(pools) if get_gpu(g).supports(job.dtype)]
    total = sum(c for g in types for _, c in pools[g])
    gbs = job.sample_slots  # microbatch slots of one iteration (the global batch)
    mbs_options = [m for m in options.microbatch_sizes if m <= gbs]
    for p in range(1, min(n, options.max_pipeline_depth, total) + 1):
        per_type = {
            g: _class_choices(model, g, pools[g], p, mbs_options, gbs, uniform_tp) for g in types
        }
        for bounds in _splits(n, p):
            for combo in itertools.product(*(per_type[g] for g in types)):
                pipes = [
                    (g, zone, m, tps)
                    for g, c in zip(types, combo, strict=True)
                    if c is not None
                    for (m, tps, ds) in (c,)
                    for (zone, _), d in zip(pools[g], ds, strict=True)
                    for _ in range(d)
                ]
                if not pipes or sum(m for _, _, m, _ in pipes) > gbs:
                    continue
                for loads in _loads(gbs, [m for _, _, m, _ in pipes]):
                    stages = []
                    for i, (a, b) in enumerate(bounds):
                        reps = tuple(
                            Replica(g, zone, tps[i], m, count)
                            for (g, zone, m, tps), count in zip(pipes, loads, strict=True)
                        )
                        stages.append(Stage(a, b, reps))
                    yield Plan(tuple(stages))


def _class_choices(model, g: str, pools, p: int, mbs_options, gbs: int, uniform: bool) -> list:
    """None (type unused) or (microbatch size, TP per stage, pipelines per pool) of type g;
    at most gbs / mbs pipelines (each runs one microbatch at least)."""
    from sailor_sim import get_gpu

    degrees = model.tp_degrees(get_gpu(g).gpus_per_node)
    tp_specs = [(t,) * p for t in degrees] if uniform else itertools.product(degrees, repeat=p)
    out: list = [None]
    for tps in tp_specs:
        width = sum(tps)
        for m in mbs_options:
            ranges = [range(min(count // width, gbs // m) + 1) for _, count in pools]
            out += [(m, tps, ds) for ds in itertools.product(*ranges) if 0 < sum(ds) <= gbs // m]
    return out


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
