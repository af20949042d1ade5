"""One Estimate from the simulator's components: the iteration is a sum of named terms.

``estimate_plan(parts, job, plan)`` reads, in this order (Calculon's ``get_total_time``):

1. per stage (``stage_summary``): each distinct replica's ``StageTime``, peak memory and $/s,
   the stage's data-parallel gradient sync and its egress;
2. per distinct pipeline (replica j of every stage): ``timing.pipeline_total`` over its stages'
   per-microbatch seconds and its boundaries' ``p2p`` seconds; the slowest is critical;
3. ``timing.pipeline_time`` splits the critical pipeline into compute, recompute, tp_comm,
   pipeline_bubble and p2p; ``timing.iteration_terms`` adds the exposed dp_sync and optimizer
   tail and the step sync. The iteration time is the sum of those terms.

``parts`` is any object with the component methods of ``Components`` (the ``Simulator``), so
this module does not import the simulator. Per-stage summaries are memoized in the
simulator's ``ComponentCache``: a plan costs O(stages + distinct pipelines) lookups and never
loops over layers, which is what lets the planner score tens of thousands of plans a second
through this same code.
"""

from __future__ import annotations

import gc
from collections import Counter
from contextlib import contextmanager
from typing import NamedTuple, Protocol

from ..spec.job import Job
from ..spec.plan import Plan, Replica, Stage, StageSlice
from . import timing
from .result import Estimate, ReplicaMemory
from .timing import StageTime


class ReplicaInfo(NamedTuple):
    """One replica of a stage at one pipeline position: what the estimate reads from it."""

    stage_time: StageTime
    peak_bytes: int
    capacity_bytes: int
    usd_per_s: float
    """What its TP group bills."""


class P2P(NamedTuple):
    """One stage boundary between two replicas, per microbatch."""

    seconds: float
    """Activations forward (the gradient back costs the same)."""
    egress_usd: float
    """Activations out and gradients back when the zones differ."""


class DataParallelSync(NamedTuple):
    """The gradient sync of one stage over its replicas, per iteration."""

    seconds: float
    egress_usd: float
    per_microbatch_s: float = 0.0
    """ZeRO-3 / hybrid: all-gathers and reduce-scatter every microbatch (before overlap)."""


class Components(Protocol):
    """The component methods ``estimate_plan`` composes (``Simulator`` implements them)."""

    def replica_info(self, job: Job, stage: Stage, index: int, depth: int, replica: Replica):
        """``ReplicaInfo`` of ``replica`` in ``stage`` at position ``index`` of ``depth``."""

    def stage_sync(self, job: Job, stage: Stage) -> DataParallelSync: ...

    def p2p(
        self, job: Job, boundary_layer: int, src: Replica, dst: Replica, stage_replicas: int
    ) -> P2P:
        """One microbatch's activations across a stage boundary, seconds and egress $."""

    def p2p_known(self, job: Job) -> dict:
        """``job``'s ``p2p`` results so far, by ``p2p_key``."""

    def step_sync_time(self, endpoints, ranks: int) -> float: ...

    def tied_sync_time(self, job: Job, ends: tuple) -> float: ...

    def replica_memory(self, job: Job, *args) -> dict[str, int]: ...

    def summaries(self) -> dict: ...

    def ids(self):
        """Assigns cache ids: ``replica_id(replica)``, ``stage_id(stage)`` (``ComponentCache``)."""


def p2p_key(src_id: int, dst_id: int, stage_replicas: int) -> int:
    """One int for a boundary's (src replica id, dst replica id, replicas of the sending
    stage): replica ids are small ints (``ComponentCache.replica_id``), and an int hashes faster
    than a tuple."""
    return (((stage_replicas << 32) | src_id) << 32) | dst_id


class StageSummary(NamedTuple):
    """One stage with its replicas at one pipeline position."""

    distinct: tuple[Replica, ...]
    """The stage's distinct replicas (first occurrences)."""
    infos: tuple[ReplicaInfo, ...]
    """Per distinct replica."""
    replica_of: tuple[int, ...]
    """For each replica position j, the index of its distinct replica."""
    choices: tuple[tuple[Replica, float, int], ...]
    """Per distinct replica: it, its ``StageTime.per_microbatch_s`` plus the schedule overhead
    (what a pipeline through it reads) and its id (``p2p_key``)."""
    sync: DataParallelSync
    optimizer_s: float
    """The slowest replica's optimizer step."""
    peak_bytes: int
    fits: bool
    usd_per_s: float
    endpoints: frozenset[tuple[str, str]]
    """(zone, GPU type) of its replicas: the step sync's ring."""
    gpus: int


class CriticalPipeline(NamedTuple):
    """The slowest pipeline: its stages' times, its boundaries' p2p seconds, its microbatches."""

    stage_times: list[StageTime]
    p2p_s: list[float]
    num_microbatches: int
    virtual_stages: int
    full_duplex: bool
    """Sends overlap receives on a boundary (``timing.transfers_per_boundary``)."""


def stage_summary(parts: Components, job: Job, stage: Stage, i: int, p: int) -> StageSummary:
    """Summarize stage ``i`` of ``p``: equal replicas are looked up once."""
    index: dict[tuple, int] = {}
    distinct: list[Replica] = []
    infos: list[ReplicaInfo] = []
    choices: list[tuple[Replica, float, int]] = []
    replica_of: list[int] = []
    prices: list[float] = []
    usd = optimizer = 0.0
    peak, fits, gpus = 0, True, 0
    for r in stage.replicas:
        k = index.get(r._key)
        if k is None:
            k = index[r._key] = len(distinct)
            info = parts.replica_info(job, stage, i, p, r)
            distinct.append(r)
            infos.append(info)
            prices.append(info.usd_per_s)
            t = info.stage_time
            seconds = t.per_microbatch_s + timing.MICROBATCH_OVERHEAD_S
            choices.append((r, seconds, parts.ids().replica_id(r)))
            optimizer = max(optimizer, t.optimizer_s)
            peak = max(peak, info.peak_bytes)
            fits = fits and info.peak_bytes <= info.capacity_bytes
        replica_of.append(k)
        usd += prices[k]  # replica by replica, in order (the same float sum as before)
        gpus += r.tp
    return StageSummary(
        tuple(distinct),
        tuple(infos),
        tuple(replica_of),
        tuple(choices),
        parts.stage_sync(job, stage),
        optimizer,
        peak,
        fits,
        usd,
        frozenset([(r.zone, r.gpu_type) for r in distinct]),
        gpus,
    )


def summarize(parts: Components, job: Job, plan: Plan) -> list[StageSummary]:
    """Every stage's summary, memoized per (job, layer range, replicas, position, depth)."""
    cache, stage_id = parts.summaries(), parts.ids().stage_id
    p = len(plan.stages)
    out = []
    for i, s in enumerate(plan.stages):
        key = (job.cache_id, s.first_layer, s.last_layer, stage_id(s), i, p)
        summary = cache.get(key)
        if summary is None:
            summary = cache[key] = stage_summary(parts, job, s, i, p)
        out.append(summary)
    return out


def pipelines(summaries: list[StageSummary]) -> dict[tuple[int, ...], int]:
    """Distinct pipelines (the distinct-replica index of every stage) and how many there are."""
    counts: dict[tuple[int, ...], int] = {}
    for path in zip(*[sm.replica_of for sm in summaries], strict=True):
        counts[path] = counts.get(path, 0) + 1
    return counts


def critical_pipeline(
    parts: Components, job: Job, plan: Plan, summaries: list[StageSummary]
) -> tuple[CriticalPipeline, float]:
    """The pipeline with the longest 1F1B time (``timing.pipeline_total``), and the p2p egress
    $ of every pipeline. Plain loops: on Python 3.11 every comprehension is a function call,
    and this runs for every distinct pipeline of every plan the planner scores."""
    best, best_total, best_path, egress = None, -1.0, (), 0.0
    known, virtual = parts.p2p_known(job), job.options.virtual_stages
    duplex = job.options.p2p_full_duplex
    # Per boundary: the receiving stage's choices, the sender's last layer, the replicas
    # sharing the sending nodes, and those shifted as ``p2p_key`` shifts them (inlined).
    head, stages = summaries[0].choices, plan.stages
    boundaries = [
        (sm.choices, s.last_layer, len(s.replicas), len(s.replicas) << 32)
        for sm, s in zip(summaries[1:], stages[:-1], strict=True)
    ]
    for path, count in pipelines(summaries).items():
        src, seconds, src_id = head[path[0]]
        per_mb, p2p_s, usd = [seconds], [], 0.0
        for (stage_choices, after, sent_by, high), k in zip(boundaries, path[1:], strict=True):
            dst, seconds, dst_id = stage_choices[k]
            per_mb.append(seconds)
            link = known.get(((high | src_id) << 32) | dst_id)
            if link is None:
                link = parts.p2p(job, after, src, dst, sent_by)
            p2p_s.append(link.seconds)
            usd += link.egress_usd
            src, src_id = dst, dst_id
        m = src.num_microbatches  # the same in every stage of a pipeline
        egress += count * m * usd
        total = timing.pipeline_total(per_mb, p2p_s, m, virtual, duplex)
        if best is None or total > best_total:  # (the first even when NaN: overflowed input)
            best, best_total, best_path = (p2p_s, m), total, path
    times = [sm.infos[k].stage_time for sm, k in zip(summaries, best_path, strict=True)]
    return CriticalPipeline(times, *best, virtual, duplex), egress


class PlanTotals(NamedTuple):
    """Per-stage figures gathered over the plan's stages (in one pass)."""

    dp_sync_s: list[float]
    optimizer_s: list[float]
    usd_per_s: float
    dp_egress_usd: float
    peak_bytes: int
    fits: bool
    endpoints: frozenset[tuple[str, str]]
    gpus: int


def plan_totals(summaries: list[StageSummary]) -> PlanTotals:
    syncs, opts, usd, egress, peak, fits, gpus = [], [], 0.0, 0.0, 0, True, 0
    endpoints = summaries[0].endpoints
    for sm in summaries:
        sync = sm.sync
        syncs.append(sync.seconds)
        opts.append(sm.optimizer_s)
        usd += sm.usd_per_s
        egress += sync.egress_usd
        if sm.peak_bytes > peak:
            peak = sm.peak_bytes
        if not sm.fits:
            fits = False
        gpus += sm.gpus
        if sm.endpoints is not endpoints and not sm.endpoints <= endpoints:
            endpoints = endpoints | sm.endpoints
    return PlanTotals(syncs, opts, usd, egress, peak, fits, endpoints, gpus)


def time_terms(critical: CriticalPipeline, totals: PlanTotals, step_sync_s: float):
    """The iteration's named terms (``timing.iteration_terms``); the tail of stage i overlaps
    the drain (backward + p2p) of the critical pipeline's stages before it."""
    c = critical
    pipe = timing.pipeline_time(
        c.stage_times, c.p2p_s, c.num_microbatches, c.virtual_stages, c.full_duplex
    )
    drain = []
    for t, p2p in zip(critical.stage_times, critical.p2p_s, strict=False):
        drain.append(t.backward_s + t.recompute_s + p2p)
    return timing.iteration_terms(pipe, totals.dp_sync_s, totals.optimizer_s, drain, step_sync_s)


def tied_ends(plan: Plan) -> tuple:
    """Per kind of pipeline, ((zone, GPU type, TP) of its first stage's replica, the same of
    its last stage's, how many pipelines), sorted; empty for one stage. Pipeline j is replica
    j of every stage, as the runtime pairs the copies of a tied matrix."""
    if len(plan.stages) < 2:
        return ()
    first, last = plan.stages[0].replicas, plan.stages[-1].replicas
    return count_tied_ends(
        (((a.zone, a.gpu_type, a.tp), (b.zone, b.gpu_type, b.tp)), 1)
        for a, b in zip(first, last, strict=True)
    )


def count_tied_ends(pipelines) -> tuple:
    """``tied_ends`` from ((first end, last end), pipelines) items, the same ends summed."""
    kinds: Counter = Counter()
    for ends, n in pipelines:
        kinds[ends] += n
    return tuple(sorted((a, b, n) for (a, b), n in kinds.items()))


def estimate_plan(
    parts: Components, job: Job, plan: Plan, iterations=None, tokens=None
) -> Estimate:
    """The Estimate of a checked plan: time terms, cost, memory (lazily, per replica)."""
    summaries = summarize(parts, job, plan)
    totals = plan_totals(summaries)
    critical, p2p_egress = critical_pipeline(parts, job, plan, summaries)
    # The per-step whole-world all-reduce of loss and gradient norm, and a tied matrix's sum.
    step_sync = parts.step_sync_time(totals.endpoints, totals.gpus)
    step_sync += parts.tied_sync_time(job, tied_ends(plan))
    terms = time_terms(critical, totals, step_sync)
    iteration = sum(terms.values())
    egress = p2p_egress + totals.dp_egress_usd
    cost_iter = totals.usd_per_s * iteration + egress
    if tokens is not None and iterations is None:
        iterations = tokens / (job.global_batch_size * job.sequence_length)

    def sources() -> tuple[str, ...]:
        return tuple(sorted({v.stage_time.source for sm in summaries for v in sm.infos}))

    def memory() -> list[ReplicaMemory]:
        return replica_memories(parts, job, plan, summaries)

    return Estimate.fast(
        {
            "iteration_time_s": iteration,
            "throughput_iters_per_s": 1.0 / iteration,
            "samples_per_s": job.global_batch_size / iteration,
            "peak_memory_bytes": totals.peak_bytes,
            "fits": totals.fits,
            "cost_per_iteration_usd": cost_iter,
            "cost_per_hour_usd": cost_iter * 3600.0 / iteration,
            "time_breakdown_s": terms,
            "cost_breakdown_usd": {"compute": totals.usd_per_s * iteration, "egress": egress},
            "memory": memory,
            "sources": sources,
            "run_iterations": iterations,
        }
    )


def replica_memories(
    parts: Components, job: Job, plan: Plan, summaries: list[StageSummary]
) -> list[ReplicaMemory]:
    """Named memory terms of every replica of every stage (what ``Estimate.memory`` holds)."""
    with gc_paused():
        return _replica_memories(parts, job, plan, summaries)


@contextmanager
def gc_paused():
    """No cyclic garbage collection while a block builds many acyclic objects: a million
    replicas' memory entries took 8 s, two thirds of it in collections that freed nothing."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _replica_memories(
    parts: Components, job: Job, plan: Plan, summaries: list[StageSummary]
) -> list[ReplicaMemory]:
    p, out = len(plan.stages), []
    for i, (s, sm) in enumerate(zip(plan.stages, summaries, strict=True)):
        d, seen = len(s.replicas), {}  # equal replicas of a stage hold equal terms: once each
        for j, r in enumerate(s.replicas):
            info = sm.infos[sm.replica_of[j]]
            terms = seen.get(r._key)
            if terms is None:
                slice_ = StageSlice.of(s, r)
                terms = parts.replica_memory(job, slice_, i, p, r.num_microbatches, d)
                seen[r._key] = terms
            fits = info.peak_bytes <= info.capacity_bytes
            out.append(
                ReplicaMemory.fast(i, j, r.gpu_type, r.zone, info.peak_bytes,
                                   info.capacity_bytes, fits, dict(terms))
            )  # fmt: skip
    return out
