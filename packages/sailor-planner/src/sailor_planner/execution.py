"""The execution options the planner searches: those that change the answer.

Activation recomputation (none / selective / full), ZeRO sharding (none, zero1, zero2, and
zero3 on one-stage plans) and sequence parallelism (when every replica has tp > 1) trade
memory for time. For each of the best plans the search found with the job's own options, every
valid combination is scored with ``Simulator.estimate`` and the best that fits and meets the
constraints is kept, with the options it needs (``RankedPlan.options``). The other options
(precision, flash attention, interleaving, p2p scatter/gather) stay as the job sets them.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterator

from sailor_sim import Job, Plan, SailorSimError
from sailor_sim.options import ExecutionOptions

from .result import RankedPlan

RECOMPUTE = ("none", "selective", "full")
ZERO_PIPELINED = ("none", "zero1", "zero2")
ZERO_ONE_STAGE = (*ZERO_PIPELINED, "zero3")


def variants(job: Job, plan: Plan) -> Iterator[ExecutionOptions]:
    """Every searched combination valid for ``plan`` (ZeRO-3 only without pipelining, SP only
    where every replica has TP > 1); the job's own options first."""
    base = job.options
    yield base
    zeros = ZERO_ONE_STAGE if plan.num_stages == 1 else ZERO_PIPELINED
    all_tp = all(r.tp > 1 for s in plan.stages for r in s.replicas)
    sps = (False, True) if all_tp else (False,)
    for recompute, zero, sp in itertools.product(RECOMPUTE, zeros, sps):
        options = dataclasses.replace(base, recompute=recompute, zero=zero, sequence_parallel=sp)
        if options != base:
            yield options


def lean(options: ExecutionOptions) -> tuple[ExecutionOptions, ...]:
    """The searched options that need the least memory: full recomputation with ZeRO-1
    (sharded optimizer states and master weights; any pipeline depth) and with ZeRO-3
    (parameters and gradients sharded too; one-stage plans only, pipelined candidates are
    refused). The planner searches under these too, so plans that fit only with them exist."""
    return (
        dataclasses.replace(options, recompute="full", zero="zero1"),
        dataclasses.replace(options, recompute="full", zero="zero3", virtual_stages=1),
    )


def best_options(sim, job: Job, ranked: RankedPlan, admits: Callable, key: Callable) -> RankedPlan:
    """``ranked`` (estimated under ``ranked.options``, None: the job's) re-scored under every
    variant; the best admitted one (ties: the job's own options, which come first)."""
    best, scored = ranked, ranked.options or job.options
    for options in variants(job, ranked.plan):
        if options == scored:
            continue
        try:
            est = sim.estimate(dataclasses.replace(job, options=options), ranked.plan)
        except SailorSimError:
            continue
        candidate = RankedPlan(ranked.plan, est, options)
        if admits(candidate) and (not admits(best) or key(candidate) < key(best)):
            best = candidate
    return best
