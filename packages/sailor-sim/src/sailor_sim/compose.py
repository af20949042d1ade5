"""Composition of the simulator's components into one Estimate (``Simulator.estimate``).

Per-stage summaries are cached per (layer range, replicas, position, depth) and per-replica
numbers per (layer range, position, replica), keyed by interned ints, so a plan costs
O(stages + distinct pipelines) dictionary lookups and never loops over layers. The formulas are
those of the public components (``timing.pipeline_time``, ``Simulator.dp_sync_time``, ...),
inlined where the planner's loop needs the speed; tests check they agree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from . import timing
from .errors import PlanError
from .estimate import Estimate, ReplicaMemory
from .gpus import get_gpu
from .job import Job
from .plan import Plan, Replica
from .prices import usd_per_second

if TYPE_CHECKING:
    from .simulator import Simulator


class StageSummary(NamedTuple):
    """Everything ``estimate`` needs from one stage with its replicas at one pipeline position."""

    distinct: tuple[Replica, ...]
    """The stage's distinct replicas (first occurrences)."""
    distinct_info: tuple[tuple, ...]
    """Per distinct replica: (StageTime, peak bytes, memory terms, capacity, $/s)."""
    pos_ids: tuple[int, ...]
    """For each replica position j, the index of its distinct replica."""
    per_microbatch: tuple[float, ...]
    """Per distinct replica: forward + backward + TP seconds per microbatch."""
    rkeys: tuple[tuple, ...]
    """Per distinct replica: its field tuple (zone at index 1)."""
    rids: tuple[int, ...]
    """Per distinct replica: its interned id (the p2p cache key)."""
    sources: frozenset[str]
    dp_sync_s: float
    optimizer_s: float
    peak_bytes: int
    fits: bool
    usd_per_s: float
    dp_egress_usd: float
    endpoints: frozenset[tuple[str, str]]
    """(zone, GPU type) of the stage's replicas (the step sync's ring)."""
    gpus: int
    """GPUs of the stage (sum of the replicas' TP degrees)."""


def estimate_plan(sim: Simulator, job: Job, plan: Plan, iterations=None, tokens=None) -> Estimate:
    """Compose the components. Per-stage summaries are cached per (layer range, position,
    replicas) and per-replica results per (layer range, position, replica), so a plan costs
    O(stages + pipelines) dictionary lookups and never loops over layers."""
    stages = plan.stages
    p = len(stages)
    jk = (job.model.name, job.dtype, job.sequence_length, job.optimizer)
    stage_cache = sim._stage_summaries.get(jk)
    if stage_cache is None:
        stage_cache = sim._stage_summaries[jk] = {}
    summaries = []
    for i, s in enumerate(stages):
        key = (s._full << 24) | (i << 12) | p  # interned (range, replicas), position, depth
        summary = stage_cache.get(key)
        if summary is None:
            summary = stage_cache[key] = _stage_summary(sim, job, s, i, p)
        summaries.append(summary)
    # Pipelines: replica j of every stage; identical pipelines are evaluated once. Replicas
    # are compared through the summaries' distinct-replica indices (ints), not field by field.
    # The loop below is pipeline_total inlined (same formula), the planner's hottest path:
    # plain lists and int keys only.
    best, best_total = None, -1.0
    pair_cache = sim._p2p_pairs.get(jk)
    if pair_cache is None:
        pair_cache = sim._p2p_pairs[jk] = ({}, {})
    p2p_by_pair, egress_by_pair = pair_cache
    per_mb = [sm.per_microbatch for sm in summaries]
    rids = [sm.rids for sm in summaries]
    last = p - 1
    egress = 0.0
    counts: dict[tuple, int] = {}
    for ids in zip(*[sm.pos_ids for sm in summaries], strict=True):
        counts[ids] = counts.get(ids, 0) + 1
    for ids, count in counts.items():
        total = worst = sum_p2p = prev = wsend = 0.0
        wi = 0
        p2p = []
        k = ids[0]
        for i in range(p):
            c = per_mb[i][k]
            total += c
            if i < last:
                k2 = ids[i + 1]
                pair = (rids[i][k] << 32) | rids[i + 1][k2]
                t = p2p_by_pair.get(pair)
                if t is None:
                    src, dst = summaries[i].distinct[k], summaries[i + 1].distinct[k2]
                    t = p2p_by_pair[pair] = sim.p2p_time(job, stages[i].last_layer, src, dst)
                    if src.zone != dst.zone:  # activations out, gradients back: egress
                        egress_by_pair[pair] = sim.p2p_egress_usd(job, src, dst)
                e = egress_by_pair.get(pair)
                if e is not None:
                    egress += count * e
                p2p.append(t)
                sum_p2p += t
                send = 2.0 * (t + prev)
                k = k2
            else:
                send = 2.0 * prev
            if c + send > worst:
                worst, wi, wsend = c + send, i, send
            prev = t if i < last else 0.0
        m = summaries[0].distinct[ids[0]].num_microbatches
        total += (m - 1) * worst + 2.0 * sum_p2p
        if total > best_total:
            best_total = total
            best = (ids, p2p, m, wi, wsend, sum_p2p)
    ids, crit_p2p, m, k, sends, sum_p2p = best
    crit_times = [sm.distinct_info[j][0] for sm, j in zip(summaries, ids, strict=True)]
    # timing.pipeline_time's breakdown for the critical pipeline (k = its bottleneck stage).
    b = crit_times[k]
    per_k = per_mb[k][ids[k]]
    compute = m * (b.forward_s + b.backward_s + timing.MICROBATCH_OVERHEAD_S)
    breakdown = {
        "compute": compute,
        "tp_comm": m * b.tp_comm_s,
        "pipeline_bubble": sum([per_mb[i][j] for i, j in enumerate(ids)]) - per_k,
        "p2p": (m - 1) * sends + 2.0 * sum_p2p,
    }
    drain = [crit_times[i].backward_s + crit_p2p[i] for i in range(p - 1)]
    tail, breakdown["optimizer"] = timing.exposed_tail(
        [sm.dp_sync_s for sm in summaries], [sm.optimizer_s for sm in summaries], drain
    )
    breakdown["dp_sync"] = tail - breakdown["optimizer"]
    # The per-step whole-world all-reduce of loss and gradient norm (= sim.plan_step_sync_time).
    eps = summaries[0].endpoints
    for sm in summaries:
        if sm.endpoints is not eps and not sm.endpoints <= eps:
            eps = eps | sm.endpoints
    sync_key = (eps, sum([sm.gpus for sm in summaries]))
    step_sync = sim._step_sync_cache.get(sync_key)  # same key as sim.step_sync_time's
    if step_sync is None:
        step_sync = sim.step_sync_time(*sync_key)
    breakdown["step_sync"] = step_sync
    iteration = best_total + tail + breakdown["step_sync"]
    usd_per_s = sum([sm.usd_per_s for sm in summaries])
    egress += sum([sm.dp_egress_usd for sm in summaries])
    cost_iter = usd_per_s * iteration + egress
    if tokens is not None and iterations is None:
        iterations = tokens / (job.global_batch_size * job.sequence_length)

    def sources() -> tuple[str, ...]:
        return tuple(sorted(frozenset().union(*[sm.sources for sm in summaries])))

    def memory() -> list[ReplicaMemory]:
        d = len(stages[0].replicas)
        out = []
        for i, s in enumerate(stages):
            sm = summaries[i]
            for j, r in enumerate(s.replicas):
                _, peak, _, cap, _ = sm.distinct_info[sm.pos_ids[j]]
                terms = sim.replica_memory(
                    job,
                    s.first_layer,
                    s.last_layer,
                    r.gpu_type,
                    r.tp,
                    r.microbatch_size,
                    i,
                    p,
                    r.num_microbatches,
                    d,
                )
                out.append(ReplicaMemory(i, j, r.gpu_type, r.zone, peak, cap, peak <= cap, terms))
        return out

    return Estimate.fast(
        {
            "iteration_time_s": iteration,
            "throughput_iters_per_s": 1.0 / iteration,
            "samples_per_s": job.global_batch_size / iteration,
            "peak_memory_bytes": max([sm.peak_bytes for sm in summaries]),
            "fits": all([sm.fits for sm in summaries]),
            "cost_per_iteration_usd": cost_iter,
            "cost_per_hour_usd": cost_iter * 3600.0 / iteration,
            "time_breakdown_s": breakdown,
            "cost_breakdown_usd": {"compute": usd_per_s * iteration, "egress": egress},
            "memory": memory,
            "sources": sources,
            "run_iterations": iterations,
        }
    )


def _stage_summary(sim: Simulator, job: Job, s, i: int, p: int) -> StageSummary:
    d = len(s.replicas)
    jk = (job.model.name, job.dtype, job.sequence_length, job.optimizer)
    cache = sim._replica_cache.get(jk)
    if cache is None:
        cache = sim._replica_cache[jk] = {}
    first, last, dp = s.first_layer, s.last_layer, d > 1
    index: dict = {}
    distinct, infos, pos_ids = [], [], []
    usd = 0.0
    for r in s.replicas:
        rk = r._id
        k = index.get(rk)
        if k is None:
            key = (first, last, i, p, dp, rk)
            v = cache.get(key)
            if v is None:
                v = cache[key] = _replica_info(sim, job, s, r, i, p, d)
            k = index[rk] = len(distinct)
            distinct.append(r)
            infos.append(v)
        pos_ids.append(k)
        usd += infos[k][4]
    sig = s._sig
    grad_bytes = sim.grad_bytes(job, first, last)
    return StageSummary(
        tuple(distinct),
        tuple(infos),
        tuple(pos_ids),
        tuple([v[0].per_microbatch_s + timing.MICROBATCH_OVERHEAD_S for v in infos]),
        tuple([r._key for r in distinct]),
        tuple([r._id for r in distinct]),
        frozenset([v[0].source for v in infos]),
        sim._dp_sync(job, first, last, s.replicas, sig),
        max([v[0].optimizer_s for v in infos]),
        max([v[1] for v in infos]),
        all([v[1] <= v[3] for v in infos]),
        usd,
        grad_bytes / 1e9 * sim._dp_egress(s.replicas, sig),
        _interned(sim, frozenset([(r.zone, r.gpu_type) for r in distinct])),
        sum([r.tp for r in s.replicas]),
    )


def _interned(sim: Simulator, endpoints: frozenset) -> frozenset:
    """One object per distinct endpoint set, so ``estimate_plan`` compares them by identity."""
    return sim._endpoint_sets.setdefault(endpoints, endpoints)


def _replica_info(sim: Simulator, job: Job, s, r: Replica, i: int, p: int, d: int) -> tuple:
    ok_key = (job.model.name, job.dtype, r.gpu_type, r.tp)
    if ok_key not in sim._valid:
        problem = job.model.tp_problem(r.tp)
        if problem is None and not get_gpu(r.gpu_type).supports(job.dtype):
            problem = f"{r.gpu_type} cannot train in {job.dtype}"
        if problem is not None:
            j = s.replicas.index(r)
            raise PlanError(problem, field=f"plan.stages[{i}].replicas[{j}]")
        sim._valid.add(ok_key)
    first, last = s.first_layer, s.last_layer
    rng = sim._range(job, first, last, r.gpu_type, r.tp, r.microbatch_size)
    peak, capacity = sim._peak(rng, r.tp, i, p, r.num_microbatches, d)  # = sim.replica_peak
    price = sim._prices.get((r.gpu_type, r.zone))
    if price is None:
        price = sim._prices[(r.gpu_type, r.zone)] = usd_per_second(r.gpu_type, r.zone, 1)
    return (rng[0], peak, None, capacity, r.tp * price)
