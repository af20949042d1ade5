"""The execution options the planner searches: those that change the answer.

Activation recomputation (none / selective / full), ZeRO sharding (none, zero1, zero2, and
zero3 on one-stage plans) and sequence parallelism (when every replica has tp > 1) trade
memory for time. For each of the best plans the search found with the job's own options, every
valid combination is scored with ``Simulator.estimate`` and the best that fits and meets the
constraints is kept, with the options it needs (``RankedPlan.options``). The other options
(precision, flash attention, interleaving, p2p scatter/gather) stay as the job sets them; so a
job with ``virtual_stages`` > 1 never gets ZeRO-3 (one stage, nothing to interleave).

Expert parallelism is searched only for mixture-of-experts models (``expert_degrees``: the
powers of two that divide the experts and every stage's replica count), so dense jobs pay
nothing for it; it shards the experts' weights, gradients and optimizer states and adds the
all-to-alls. Context parallelism changes how many replicas a plan needs (each sample is
split over cp of them), so it is not a variant of a found plan: a job with sequences of at
least ``LONG_SEQUENCE`` tokens gets one more lean search with ``LEAN_CONTEXT_PARALLEL``, where
activations per GPU shrink by cp. FP8 jobs never get ZeRO-3 (refused:
``options.check_options``). The search's own tables (``costs.py``) hold the memory EP saves
but not the all-to-alls or the KV exchange (they depend on where the replicas are); every
candidate's re-scoring by the simulator includes them.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Iterator

from sailor_sim import ExecutionOptions, Job, Plan, SailorSimError

from ..result import RankedPlan

RECOMPUTE = ("none", "selective", "full")
ZERO_PIPELINED = ("none", "zero1", "zero2")
ZERO_ONE_STAGE = (*ZERO_PIPELINED, "zero3")


def variants(job: Job, plan: Plan) -> Iterator[ExecutionOptions]:
    """Every searched combination valid for ``plan`` (ZeRO-3 only without pipelining, SP only
    where every replica has TP > 1); the job's own options first."""
    base = job.options
    yield base
    zeros = ZERO_ONE_STAGE if plan.num_stages == 1 else ZERO_PIPELINED
    if base.fp8 != "none":
        zeros = ZERO_PIPELINED
    all_tp = all(r.tp > 1 for s in plan.stages for r in s.replicas)
    sps = (False, True) if all_tp else (False,)
    eps = expert_degrees(job, plan)
    for recompute, zero, sp, ep in itertools.product(RECOMPUTE, zeros, sps, eps):
        options = dataclasses.replace(
            base, recompute=recompute, zero=zero, sequence_parallel=sp, expert_parallel=ep
        )
        if options != base:
            yield options


def expert_degrees(job: Job, plan: Plan) -> tuple[int, ...]:
    """Expert-parallel degrees worth scoring for ``plan``: the job's own, and for a MoE model
    every power of two that divides its experts and each stage's replica count."""
    moe = job.model.moe
    own = job.options.expert_parallel
    if moe is None:
        return (own,)
    replicas = [len(s.replicas) for s in plan.stages]
    degrees = {own} | {
        d
        for d in (1, 2, 4, 8, 16, 32, 64)
        if moe.num_experts % d == 0 and all(n % d == 0 for n in replicas)
    }
    return tuple(sorted(degrees))


def fitted_expert_parallel(job: Job, plan: Plan) -> Job:
    """``job`` with the largest expert-parallel degree up to its own that divides every stage's
    replica count of ``plan`` (the planner's search does not know the replica counts its
    candidates will have; the simulator refuses a degree that does not divide them). The
    ranked plan reports the degree it was scored with."""
    ep = job.options.expert_parallel
    counts = [len(s.replicas) for s in plan.stages]
    if all(n % ep == 0 for n in counts):
        return job
    fitted = max(d for d in range(1, ep + 1) if ep % d == 0 and all(n % d == 0 for n in counts))
    options = dataclasses.replace(job.options, expert_parallel=fitted)
    return dataclasses.replace(job, options=options)


LONG_SEQUENCE = 32768
"""Sequences from this length on are searched with context parallelism too: below it a
sample's activations fit a GPU with recomputation, and ring steps are too short to hide the
KV exchange behind attention."""
LEAN_CONTEXT_PARALLEL = 4
"""The context-parallel degree of that search (a TP-2 replica group of 8 GPUs stays in an
NVLink node)."""

LEAN_EXPERT_PARALLEL = 8
"""The expert-parallel degree the lean search of a MoE job uses (one 8-GPU node of replicas at
TP 1): most of the experts' memory off each GPU while the all-to-all can stay on NVLink."""


def lean(
    options: ExecutionOptions, moe=None, sequence_length: int = 0
) -> tuple[ExecutionOptions, ...]:
    """The searched options that need the least memory: full recomputation with ZeRO-1
    (sharded optimizer states and master weights; any pipeline depth) and with ZeRO-3
    (parameters and gradients sharded too; one-stage plans only, pipelined candidates are
    refused). The planner searches under these too, so plans that fit only with them exist.
    Interleaved jobs (``virtual_stages`` > 1) skip ZeRO-3: it cannot pipeline, and the job's
    virtual stages are never changed by the search.
    A MoE job (``moe``: its ``MoESpec``) also splits its experts over up to
    ``LEAN_EXPERT_PARALLEL`` replicas; plans whose replica counts it does not divide are
    refused when re-scored. FP8 jobs skip ZeRO-3 (not modelled with FP8 weight caches).
    Sequences of ``LONG_SEQUENCE`` tokens or more add ZeRO-1 with ``LEAN_CONTEXT_PARALLEL``."""
    ep = options.expert_parallel
    if moe is not None and ep == 1:
        ep = math.gcd(moe.num_experts, LEAN_EXPERT_PARALLEL)
    out = [dataclasses.replace(options, recompute="full", zero="zero1", expert_parallel=ep)]
    # ZeRO-3 plans are one stage, so they cannot interleave: a job that asks for virtual
    # stages keeps them (README: "kept as given") and skips this set.
    if options.fp8 == "none" and options.virtual_stages == 1:
        out.append(dataclasses.replace(options, recompute="full", zero="zero3", expert_parallel=ep))
    cp = LEAN_CONTEXT_PARALLEL
    long = sequence_length >= LONG_SEQUENCE and sequence_length % (2 * cp) == 0
    if long and options.context_parallel == 1 and options.flash_attention is not False:
        out.append(dataclasses.replace(out[0], context_parallel=cp))
    return tuple(out)


def best_options(sim, job: Job, ranked: RankedPlan, admits: Callable, key: Callable) -> RankedPlan:
    """``ranked`` (estimated under ``ranked.options``, None: the job's) re-scored under every
    variant; the best admitted one (ties: the job's own options, which come first)."""
    best, scored = ranked, ranked.options or job.options
    if (scored.context_parallel, scored.expert_parallel) != (
        job.options.context_parallel,
        job.options.expert_parallel,
    ):  # a lean plan's replicas are laid out for its CP/EP degrees: vary the rest only
        degrees = {"context_parallel": scored.context_parallel}
        degrees["expert_parallel"] = scored.expert_parallel
        job = dataclasses.replace(job, options=dataclasses.replace(job.options, **degrees))
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
