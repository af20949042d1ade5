"""Allocation: how many pipelines of each class, in which zones, with how many microbatches —
scored with the simulator's own components, so the score of a candidate is the simulator's
estimate of the plan it builds, and a candidate is kept only where every replica fits by the
simulator's own per-replica verdict (``Simulator.replica_peak``).

Placement keeps a pipeline's stages of one region in one zone where capacity allows (zones
tried largest first, so replicas of a stage span as few zones as possible); stages of a region
whose zones are all too full are placed one by one. Each (class, zone pattern) becomes a group
of identical pipelines for balancing and scoring.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import NamedTuple

from sailor_sim import (
    Plan,
    Replica,
    Stage,
    StageSlice,
    count_tied_ends,
    exposed_tail,
    get_gpu,
    hybrid_divides,
    microbatch_step,
    pipeline_time,
    usd_per_second,
)

from .balance import ClassLoad, balance, uniform
from .costs import CostView
from .templates import Shape

Pattern = tuple[str, ...]
"""Zone of every stage of one pipeline."""


@dataclass(frozen=True)
class Group:
    """``count`` identical pipelines: one class on one zone pattern."""

    cls: int
    pattern: Pattern
    count: int


@dataclass(frozen=True)
class Scored:
    """A complete candidate and its figures (the simulator's formulas)."""

    shape: Shape
    groups: tuple[Group, ...]
    loads: tuple[ClassLoad, ...]
    iteration_s: float
    cost_per_iteration: float
    cost_per_hour: float
    gpus: int
    layout: tuple = ()
    """Zones each stage may use (its region), as searched."""

    @property
    def throughput(self) -> float:
        return 1.0 / self.iteration_s


class Draft(NamedTuple):
    """A candidate before balancing (``Scorer.draft``): each stage's ring runs, each stage's
    lead (GPU, TP), each group's timing."""

    shape: Shape
    groups: tuple[Group, ...]
    kinds: list
    firsts: list
    info: list


def place(
    shape: Shape,
    layout: tuple[tuple[str, ...], ...],
    counts: tuple[int, ...],
    free: dict,
    stage_major: bool = False,
) -> tuple[Group, ...] | None:
    """Zone patterns for ``counts[c]`` pipelines of each class; None if they do not fit.

    ``layout[i]`` lists the zones stage i may use (its region), best first; ``free`` maps
    (GPU type, zone) to GPUs available and is not modified. Pipeline-major (default) keeps a
    pipeline's stages of one region in one zone (p2p in-zone, the all-reduce may cross zones);
    ``stage_major`` fills zones stage by stage (each stage's all-reduce in as few zones as
    possible, pipelines cross zones).
    """
    free = dict(free)
    groups: list[Group] = []
    blocks = [(i, i) for i in range(shape.depth)] if stage_major else _blocks(layout)
    for c, (cls, want) in enumerate(zip(shape.classes, counts, strict=True)):
        if want == 0:
            continue
        per_block: list[list[tuple[Pattern, int]]] = []
        for first, last in blocks:
            runs = _place_block(cls.gpu, cls.tps[first : last + 1], layout[first], want, free)
            if runs is None:
                return None
            per_block.append(runs)
        for pattern, count in _zip_runs(per_block):
            groups.append(Group(c, pattern, count))
    return tuple(groups)


def _blocks(layout) -> list[tuple[int, int]]:
    out, start = [], 0
    for i in range(1, len(layout) + 1):
        if i == len(layout) or layout[i] != layout[start]:
            out.append((start, i - 1))
            start = i
    return out


def _place_block(g, tps, zones, want, free) -> list[tuple[Pattern, int]] | None:
    need = sum(tps)
    runs: list[tuple[Pattern, int]] = []
    left = want
    for z in zones:
        k = min(left, free.get((g, z), 0) // need)
        if k:
            free[(g, z)] -= k * need
            runs.append(((z,) * len(tps), k))
            left -= k
        if not left:
            return runs
    for _ in range(left):  # split pipelines stage by stage
        pattern = []
        for tp in tps:
            z = max(zones, key=lambda z: free.get((g, z), 0))
            if free.get((g, z), 0) < tp:
                return None
            free[(g, z)] -= tp
            pattern.append(z)
        runs.append((tuple(pattern), 1))
    return runs


def _zip_runs(per_block: list[list[tuple[Pattern, int]]]):
    """Pair pipeline k's zones across blocks (run-length lists of the same total): a new
    pattern starts wherever some block's run ends."""
    if len(per_block) == 1:  # one block: its runs are the patterns
        yield from per_block[0]
        return
    ends = [list(itertools.accumulate(n for _z, n in runs)) for runs in per_block]
    idx = [0] * len(per_block)
    start = 0
    for cut in sorted(set().union(*ends)):
        pattern: Pattern = ()
        for b, runs in enumerate(per_block):
            if ends[b][idx[b]] == start:  # that block's run ended where this one starts
                idx[b] += 1
            pattern += runs[idx[b]][0]
        yield pattern, cut - start
        start = cut


class Scorer:
    """Scores candidates of one job with the simulator's components (caches per shape)."""

    def __init__(self, cv: CostView) -> None:
        self.cv = cv
        self.sim = cv.sim
        self.job = cv.job
        self._group_cache: dict[tuple, tuple] = {}
        self._ring_cache: dict[tuple, tuple[float, float]] = {}
        self._sync_cache: dict[tuple, tuple] = {}
        self._replicas: dict[tuple, Replica] = {}
        self._fits: dict[tuple, bool] = {}

    def pipeline_s(self, times, p2p, num_microbatches: int) -> float:
        """One pipeline's 1F1B seconds as the simulator composes them
        (``timing.pipeline_time``), with the job's virtual stages (interleaving divides the
        fill and drain by v and sends every boundary tensor v times) and p2p style."""
        options = self.job.options
        return pipeline_time(
            times, p2p, num_microbatches, options.virtual_stages, options.p2p_full_duplex
        ).total_s

    def step(self, depth: int) -> int:
        """What every pipeline's microbatch count must be a multiple of at this depth: p
        under interleaved 1F1B (``sailor_sim.spec.interleave``), else 1."""
        return microbatch_step(self.job.options.virtual_stages, depth)

    def replica(self, g: str, zone: str, tp: int, mbs: int) -> Replica:
        """One validated Replica per (type, zone, TP, mbs): the p2p cache keys on it."""
        key = (g, zone, tp, mbs)
        r = self._replicas.get(key)
        if r is None:
            r = self._replicas[key] = Replica(g, zone, tp, mbs, 1)
        return r

    def group_timing(self, shape: Shape, cls_index: int, pattern: Pattern, d: int = 1):
        """(stage times, p2p per boundary, bottleneck B, fill F, $/s per pipeline); ``d``
        pipelines in all (the replicas of a stage share their nodes' NICs)."""
        cls = shape.classes[cls_index]
        # p2p shares a node's NICs among min(d, GPUs per node / TP) replicas (``Simulator.p2p``):
        # beyond that d changes nothing, and capping it lets allocations share one entry.
        d = min(d, max(1, get_gpu(cls.gpu).gpus_per_node // min(cls.tps)))
        key = (shape, cls_index, pattern, d)
        hit = self._group_cache.get(key)
        if hit is not None:
            return hit
        times = [
            self.sim.stage_time(self.job, StageSlice(a, b, cls.gpu, tp, cls.mbs))
            for (a, b), tp in zip(shape.bounds, cls.tps, strict=True)
        ]
        reps = [
            self.replica(cls.gpu, z, tp, cls.mbs) for z, tp in zip(pattern, cls.tps, strict=True)
        ]
        p2p = [
            self.sim.p2p_time(self.job, shape.bounds[i][1], reps[i], reps[i + 1], d)
            for i in range(len(reps) - 1)
        ]
        one = self.pipeline_s(times, p2p, 1)
        two = self.pipeline_s(times, p2p, 2)
        bottleneck = two - one
        fill = one - bottleneck
        usd_per_s = sum(
            usd_per_second(cls.gpu, z, tp) for z, tp in zip(pattern, cls.tps, strict=True)
        )
        # One microbatch's activations out and gradients back (replicas carry M = 1).
        egress_per_mb = sum(
            self.sim.p2p_egress_usd(self.job, reps[i], reps[i + 1]) for i in range(len(reps) - 1)
        )
        hit = (times, p2p, bottleneck, fill, usd_per_s, egress_per_mb)
        self._group_cache[key] = hit
        return hit

    def ring(self, shape: Shape, stage: int, kinds: tuple) -> tuple[float, float]:
        """(all-reduce seconds, egress $) of one stage: ``Simulator.ring_time`` over ``kinds``,
        sorted ((zone, g, tp), replicas) runs as ``timing.ring_kinds`` makes them."""
        key = (shape.bounds[stage], kinds)
        hit = self._ring_cache.get(key)
        if hit is None:
            first, last = shape.bounds[stage]
            hit = self._ring_cache[key] = self.sim.ring_time(self.job, first, last, kinds)
        return hit

    def fits(self, shape: Shape, groups: tuple[Group, ...], loads) -> bool:
        """The simulator's memory verdict on the plan these groups build: every distinct
        (class, stage, microbatches) replica, ``Simulator.replica_peak`` <= capacity."""
        d = sum(g.count for g in groups)
        p = shape.depth
        for g, load in zip(groups, loads, strict=True):
            cls = shape.classes[g.cls]
            for m in {load.base, load.top} if g.count > load.extra else {load.top}:
                key = (shape.bounds, cls, m, d)  # d: the ZeRO shard group too
                ok = self._fits.get(key)
                if ok is None:
                    ok = self._fits[key] = all(
                        self.replica_fits(a, b, cls.gpu, tp, cls.mbs, i, p, m, d)
                        for i, ((a, b), tp) in enumerate(zip(shape.bounds, cls.tps, strict=True))
                    )
                if not ok:
                    return False
        return True

    def replica_fits(self, a, b, g, tp, mbs, i, p, m, d) -> bool:
        """The simulator's verdict on one replica (stage i of p, m microbatches, d replicas)."""
        slice_ = StageSlice(a, b, g, tp, mbs)
        peak, capacity = self.sim.replica_peak(self.cv.memory_job, slice_, i, p, m, d)
        return peak <= capacity

    def sync(self, shape: Shape, stage: int, kinds: tuple, max_mb: int, first) -> tuple:
        """``Simulator.ring_sync`` of one stage (seconds, egress $, ZeRO traffic per
        microbatch) over ``kinds`` runs; ``first`` = (GPU, TP) of the stage's first replica."""
        zero = self.job.options.zero
        key = (
            shape.bounds[stage],
            kinds,
            max_mb if zero == "zero3" else 0,  # only ZeRO-3 pays egress per microbatch
            first if zero == "hybrid" else None,
        )
        hit = self._sync_cache.get(key)
        if hit is None:
            a, b = shape.bounds[stage]
            hit = self._sync_cache[key] = self.sim.ring_sync(self.job, a, b, kinds, max_mb, *first)
        return hit

    def _sharded(self, shape: Shape, group: Group, info: tuple, kinds: list, firsts) -> tuple:
        """``info`` (``group_timing``) with ZeRO's effect on every stage time
        (``Simulator.sharded_time``: the optimizer steps its shard, exposed shard traffic over
        each stage's ring ``kinds``) and the bottleneck and fill recomputed; unchanged without
        ZeRO."""
        if not self.job.options.shards_optimizer:
            return info
        key = (shape, group.cls, group.pattern, tuple(kinds), tuple(firsts))
        hit = self._group_cache.get(key)
        if hit is None:
            cls = shape.classes[group.cls]
            times = [
                self.sim.sharded_time(self.job, StageSlice(a, b, cls.gpu, tp, cls.mbs), t, k, lead)
                for t, (a, b), tp, k, lead in zip(
                    info[0], shape.bounds, cls.tps, kinds, firsts, strict=True
                )
            ]
            one = self.pipeline_s(times, info[1], 1)
            two = self.pipeline_s(times, info[1], 2)
            hit = self._group_cache[key] = (times, info[1], two - one, 2 * one - two, *info[4:])
        return hit

    def draft(self, shape: Shape, groups: tuple[Group, ...]) -> Draft:
        """What scoring ``groups`` starts from: each stage's ring, its lead replica, and each
        group's timing (``group_timing``, under ZeRO ``_sharded``)."""
        d = sum(g.count for g in groups)
        p = shape.depth
        kinds = [self.ring_kinds(shape, groups, i) for i in range(p)]
        lead = shape.classes[groups[0].cls]
        firsts = [(lead.gpu, lead.tps[i]) for i in range(p)]
        info = [
            self._sharded(shape, g, self.group_timing(shape, g.cls, g.pattern, d), kinds, firsts)
            for g in groups
        ]
        return Draft(shape, groups, kinds, firsts, info)

    @staticmethod
    def ring_kinds(shape: Shape, groups: tuple[Group, ...], stage: int) -> tuple:
        """Stage ``stage``'s ring: runs of (zone, GPU, TP) replicas, as timing.ring_kinds
        makes them."""
        runs: dict[tuple, int] = {}
        for g in groups:
            cls = shape.classes[g.cls]
            k = (g.pattern[stage], cls.gpu, cls.tps[stage])
            runs[k] = runs.get(k, 0) + g.count
        return tuple(sorted(runs.items()))

    def first_ring(self, shape: Shape, groups: tuple[Group, ...]) -> float:
        """Seconds of stage 0's sync over ``groups`` as ``finish`` counts them (ZeRO-3's are
        0: its traffic is per microbatch, in the stage times)."""
        if self.job.options.zero == "zero3":  # its sync key needs the loads; 0 s anyway
            return 0.0
        lead = shape.classes[groups[0].cls]
        kinds = self.ring_kinds(shape, groups, 0)
        return self.sync(shape, 0, kinds, 1, (lead.gpu, lead.tps[0])).seconds

    def bound(self, draft: Draft) -> tuple[float, float, float]:
        """(upper bound on iterations/s, lower bounds on $/iteration and $/hour) of what
        ``finish`` scores for ``draft``, without balancing it.

        Why it is sound: a pipeline of a group with M microbatches takes M B + F
        (``timing.pipeline_time`` is linear in M; B and F as ``group_timing`` derives them),
        the critical one T at least every pipeline's; the microbatches must carry the global
        batch, so T >= (gbs + sum_j d_j mbs_j F_j / B_j) / sum_j (d_j mbs_j / B_j), and T >=
        B_j + F_j (one microbatch each). The tail (``exposed_tail``) is at least stage 0's
        sync and optimizer step, and the step sync is added whole. The bill is exact, egress
        only adds."""
        shape, groups, info = draft.shape, draft.groups, draft.info
        rate = spread = longest = 0.0
        for g, x in zip(groups, info, strict=True):
            mbs = shape.classes[g.cls].mbs
            rate += g.count * mbs / x[2]
            spread += g.count * mbs * x[3] / x[2]
            longest = max(longest, x[2] + x[3])
        pipes = max((self.job.sample_slots + spread) / rate, longest)
        sync0 = self.first_ring(shape, groups)
        opt0 = max(x[0][0].optimizer_s for x in info)
        t = pipes + sync0 + opt0 + self._step_sync(shape, groups)
        usd_per_s = sum(g.count * x[4] for g, x in zip(groups, info, strict=True))
        return 1.0 / t, usd_per_s * t, usd_per_s * 3600.0

    def _step_sync(self, shape: Shape, groups: tuple[Group, ...]) -> float:
        """The per-step whole-world all-reduce and a tied matrix's sum between the first and
        last stage, as Simulator.estimate adds them (``compose.tied_ends``)."""
        gpus = sum(g.count * shape.classes[g.cls].gpus for g in groups)
        endpoints = {(z, shape.classes[g.cls].gpu) for g in groups for z in g.pattern}
        sync = self.sim.step_sync_time(endpoints, gpus)
        if shape.depth > 1 and self.job.model.tie_word_embeddings:
            ends = count_tied_ends(
                (((g.pattern[0], c.gpu, c.tps[0]), (g.pattern[-1], c.gpu, c.tps[-1])), g.count)
                for g, c in ((g, shape.classes[g.cls]) for g in groups)
            )
            sync += self.sim.tied_sync_time(self.job, ends)
        return sync

    def score(self, shape: Shape, groups: tuple[Group, ...], layout: tuple = ()) -> Scored | None:
        return self.finish(self.draft(shape, groups), layout)

    def loads(self, draft: Draft) -> list | None:
        """Microbatches per pipeline of each group: balanced so the pipelines finish together,
        or under ZeRO-2/3 / hybrid and expert parallelism one count for all
        (``balance.uniform``; every stage then needs one TP degree:
        ``ExecutionOptions.uniform_replicas``); None where none exists."""
        shape, groups, info = draft.shape, draft.groups, draft.info
        counts = [g.count for g in groups]
        mbs = [shape.classes[g.cls].mbs for g in groups]
        step = self.step(shape.depth)  # interleaved 1F1B: counts multiples of p
        if self.job.options.uniform_replicas:
            if len({shape.classes[g.cls].tps for g in groups}) > 1:
                return None
            if self.job.options.zero == "hybrid" and not self._hybrid_divides(shape, groups):
                return None
            return uniform(self.job.sample_slots, counts, mbs, step)
        bottleneck, fill = [x[2] for x in info], [x[3] for x in info]
        return balance(self.job.sample_slots, counts, mbs, bottleneck, fill, step)

    @staticmethod
    def _hybrid_divides(shape: Shape, groups: tuple[Group, ...]) -> bool:
        """Whether every stage's hybrid shard group (one node of the lead pipeline's replicas,
        ``sailor_sim.hybrid_divides``) divides the pipelines."""
        d = sum(g.count for g in groups)
        lead = shape.classes[groups[0].cls]
        return all(hybrid_divides(lead.gpu, tp, d) for tp in lead.tps)

    def finish(self, draft: Draft, layout: tuple = ()) -> Scored | None:
        """The candidate ``draft`` stands for, balanced and scored; None where no balance
        exists or a replica does not fit."""
        shape, groups, kinds, firsts, info = draft
        loads = self.loads(draft)
        if loads is None:
            return None
        p = shape.depth
        # The critical pipeline and its 1F1B time, exactly as the simulator computes it.
        crit_total, crit = -1.0, None
        for x, load in zip(info, loads, strict=True):
            total = self.pipeline_s(x[0], x[1], load.top)
            if total > crit_total:
                crit_total, crit = total, x
        if not self.fits(shape, groups, loads):
            return None
        max_mb = max(load.top for load in loads)
        syncs, opts, egress = [], [], 0.0
        for i in range(p):
            sync = self.sync(shape, i, kinds[i], max_mb, firsts[i])
            egress += sync.egress_usd
            syncs.append(sync.seconds)
            opts.append(max(x[0][i].optimizer_s for x in info))
        # as compose.time_terms: each stage's drain is its backward, recomputation and p2p
        drain = [crit[0][i].backward_s + crit[0][i].recompute_s + crit[1][i] for i in range(p - 1)]
        tail = exposed_tail(syncs, opts, drain)[0]
        gpus = sum(g.count * shape.classes[g.cls].gpus for g in groups)
        iteration = crit_total + tail + self._step_sync(shape, groups)
        usd_per_s = sum(g.count * x[4] for g, x in zip(groups, info, strict=True))
        for g, x, load in zip(groups, info, loads, strict=True):
            micro = load.total(g.count)
            egress += x[5] * micro
        cost_iter = usd_per_s * iteration + egress
        return Scored(
            shape,
            groups,
            tuple(loads),
            iteration,
            cost_iter,
            cost_iter * 3600 / iteration,
            gpus,
            layout,
        )


def build_plan(s: Scored) -> Plan:
    """The plan a scored candidate stands for: pipeline order = group order."""
    per_stage: list[list[Replica]] = [[] for _ in s.shape.bounds]
    for g, load in zip(s.groups, s.loads, strict=True):
        cls = s.shape.classes[g.cls]
        for m in load.counts(g.count):
            for i, (z, tp) in enumerate(zip(g.pattern, cls.tps, strict=True)):
                per_stage[i].append(Replica(cls.gpu, z, tp, cls.mbs, m))
    return Plan(
        tuple(
            Stage(a, b, tuple(reps)) for (a, b), reps in zip(s.shape.bounds, per_stage, strict=True)
        )
    )
