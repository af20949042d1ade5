"""Pipeline shapes: a layer split plus, per GPU type, the TP degree and time of every stage.

A *class* is the set of pipelines of one GPU type on a shape: the same microbatch size, TP per
stage and per-microbatch stage times. A shape holds one class per GPU type it uses, all on the
same layer split (a plan's stages are shared by all its pipelines).

Per (GPU type g, pipeline depth P, microbatch size m, base TP t) the stage-cost matrices give,
for every layer range a..b and position, the per-microbatch time (compute + TP communication +
the stage's blocking p2p sends, as the simulator's 1F1B model counts them) on the smallest TP
degree >= t that surely fits in memory at that position (the most microbatches a pipeline can
have in flight, min(P - i, gbs / m), and a DP communicator), else the smallest that may fit
(one microbatch, no DP: a lower bound; under ZeRO always this one, as memory then depends on
the data parallelism), inf only where none may fit. So no range is dropped that
some plan could fit; ``Scorer.score`` applies the simulator's exact verdict to every candidate.
Under interleaved 1F1B a range that cannot be cut into the job's virtual stages with a layer in
each (``CostView.chunkable``, sailor-sim's rule) costs inf at every position: no split uses it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sailor_sim import Replica

from .costs import INF, CostView
from .partition import Bounds, best_splits_many, even_bounds


@dataclass(frozen=True)
class ClassShape:
    gpu: str
    mbs: int
    tps: tuple[int, ...]
    """TP degree per stage."""

    @property
    def gpus(self) -> int:
        """GPUs of one pipeline."""
        return sum(self.tps)


@dataclass(frozen=True)
class Shape:
    bounds: Bounds
    classes: tuple[ClassShape, ...]

    @property
    def depth(self) -> int:
        return len(self.bounds)


@dataclass(frozen=True)
class StageTables:
    """For one (g, P, m, t): per position i, best time and chosen TP for every range a..b."""

    cost: tuple[np.ndarray, ...]
    tp: tuple[np.ndarray, ...]


def stage_tables(
    cv: CostView, g: str, p: int, m: int, t: int | tuple[int, ...], zone: str, poll=None
) -> StageTables | None:
    """None when some position cannot hold even one layer id (early stop).

    ``t`` is a base TP degree (each stage takes the smallest degree >= t that fits) or a
    tuple with exactly one degree per stage. ``poll`` (the search's) is called per position:
    a deep table took 0.1 s, long enough to keep a cancelled search running.
    """
    job = cv.job
    mm = max(1, job.sample_slots // m)
    if isinstance(t, tuple):
        if any(cv.profiled_oom(g, m, d) for d in t):
            return None
        per_stage = [[d] for d in t]
    else:
        per_stage = [[d for d in cv.tp_of(g) if d >= t and not cv.profiled_oom(g, m, d)]] * p
        if not per_stage[0]:
            return None
    cap = cv.capacity(g)
    chunkable = cv.chunkable()
    if p == 1:
        return _one_stage_tables(cv, g, m, tuple(per_stage[0]), cap, chunkable)
    costs, tps = [], []
    p2p = _p2p_same_zone(cv, g, m, sorted({d for ds in per_stage for d in ds}), zone)
    for i in range(p):
        if poll is not None:
            poll()
        neighbours = (i > 0) + (i < p - 1)
        best, choice, diag = _position(
            cv, g, m, tuple(per_stage[i]), min(p - i, mm), neighbours, cap, p2p, (i, p, mm)
        )
        # Early stop: this position cannot hold even one layer id of its reachable window.
        if not any(diag[i : cv.n - (p - i) + 1]):
            return None
        if chunkable is not None:  # interleaved 1F1B: ranges too short for v chunks are out
            best = np.where(chunkable, best, INF)
        costs.append(best)
        tps.append(choice)
    return StageTables(tuple(costs), tuple(tps))


def _one_stage_tables(cv: CostView, g, m, degrees, cap, chunkable) -> StageTables | None:
    """``stage_tables`` of a one-stage pipeline: its only range is every layer id, so only
    that entry is computed (as ``_position`` would: the first degree that surely fits, else
    the first that may fit; ``CostView.whole_time`` is the time matrix's entry bit for bit),
    the rest inf. A search under options whose stage times no deeper table shares (the
    ZeRO-3 lean search: one-stage plans only) then never tabulates per-layer times."""
    last = cv.n - 1
    for sure in _fit_checks(cv):
        for d in degrees:
            if cv.fit_matrix(g, m, d, 1, 0, cap, sure)[0, last]:
                if chunkable is not None and not chunkable[0, last]:
                    return None
                best = np.full((cv.n, cv.n), INF)
                choice = np.zeros((cv.n, cv.n), dtype=np.int64)
                best[0, last], choice[0, last] = cv.whole_time(g, m, d), d
                return StageTables((best,), (choice,))
    return None


def _position(cv: CostView, g, m, degrees, in_flight, neighbours, cap, p2p, stage):
    """(time, TP) matrices of one pipeline position: the first degree that surely fits, else
    the first that may fit, per range. Cached on the CostView by everything they depend on,
    the p2p included: positions of different depths share them (under ZeRO only the lower
    bound is used, which has one microbatch in flight whatever ``in_flight`` is, so every
    position with the same neighbours shares one), except under interleaving, whose memory
    depends on ``stage`` = (i, p, the most microbatches) itself."""
    sure_checks = _fit_checks(cv)
    if not sure_checks[0]:
        in_flight = 1
    # The p2p each degree counts (its zone's) is part of the key: a Planner keeps one
    # CostView per job across requests whose inventories may have other reference zones.
    # interleaved: the sure verdict is the stage's, at (i, p), not p - i (``fit_matrix``)
    place = stage if cv.interleaved and sure_checks[0] else None
    key = ("position", g, m, degrees, in_flight, neighbours, cap) + (
        tuple(p2p[d] for d in degrees),
        place,
    )
    hit = cv.memo.get(key)
    if hit is not None:
        return hit
    best = np.full((cv.n, cv.n), INF)
    choice = np.zeros((cv.n, cv.n), dtype=np.int64)
    # Under ZeRO a range's memory depends on the data parallelism the search has not chosen
    # yet: "surely fits" (no sharding) would always pick a larger TP than the plan needs, so
    # the smallest degree that may fit is taken and the Scorer's exact check decides.
    for sure in sure_checks:
        if not sure and np.isfinite(best[cv.upper]).all():
            break  # every range surely fits some degree: the lower bound adds nothing
        for d in degrees:
            fits = cv.fit_matrix(g, m, d, in_flight, neighbours, cap, sure, stage)
            time = cv.time_matrix(g, m, d, p2p[d] * neighbours)
            take = fits & ~np.isfinite(best)
            np.copyto(best, time, where=take)
            np.copyto(choice, d, where=take)
    diag = tuple(np.isfinite(np.diagonal(best)).tolist())
    cv.memo[key] = (best, choice, diag)
    return best, choice, diag


def _fit_checks(cv: CostView) -> tuple[bool, ...]:
    """The memory verdicts a table tries, in order: "surely fits" then "may fit"; under ZeRO
    only "may fit" (memory then depends on the data parallelism, see ``_position``)."""
    return (False,) if cv.job.options.shards_optimizer else (True, False)


def _p2p_same_zone(cv: CostView, g: str, m: int, degrees: list[int], zone: str) -> dict[int, float]:
    """Seconds of one microbatch's activation send to a same-zone neighbour of the same type,
    per TP degree (cached on the CostView: every depth asks for the same ones)."""
    key = ("p2p", g, m, tuple(degrees), zone)
    out = cv.memo.get(key)
    if out is None:
        out = cv.memo[key] = {}
        for d in degrees:
            r = Replica(g, zone, d, m, 1)
            out[d] = cv.sim.p2p_time(cv.job, 0, r, r) if cv.job.model.num_layer_ids > 1 else 0.0
    return out


def surely_fits(cv: CostView, shape: Shape) -> bool:
    """Whether every plan of ``shape`` fits under ``cv``'s job options: each stage range, at
    its TP, fits with the most microbatches in flight and a DP communicator (``fit_matrix``
    sure). Under ZeRO memory depends on the data parallelism: never sure."""
    if cv.job.options.shards_optimizer:
        return False
    p = shape.depth
    for cls in shape.classes:
        mm = max(1, cv.job.global_batch_size // cls.mbs)
        for i, ((a, b), tp) in enumerate(zip(shape.bounds, cls.tps, strict=True)):
            neighbours = (i > 0) + (i < p - 1)
            fits = cv.fit_matrix(
                cls.gpu,
                cls.mbs,
                tp,
                min(p - i, mm),
                neighbours,
                cv.capacity(cls.gpu),
                stage=(i, p, mm),
            )
            if not fits[a, b]:
                return False
    return True


def fits_every_allocation(scorer, shape: Shape, of=None) -> bool:
    """Whether every plan of ``shape`` that fits under ``of``'s memory job (a Scorer; None:
    every plan) fits under ``scorer``'s, a ZeRO one: each stage at its TP with the most
    microbatches in flight, with one replica and with two (``Scorer.replica_fits``, the
    simulator's verdict); ZeRO's shards only shrink as replicas join, so a stage that fits
    with two fits with more. A one-replica plan that does not fit under ``of`` needs no
    check. (The ZeRO-3 lean search skips the shapes the ZeRO-1 one covers this way.)"""
    if not scorer.cv.memory_job.options.shards_optimizer:
        raise ValueError("fits_every_allocation: the memory job has no ZeRO")
    p = shape.depth
    for cls in shape.classes:
        mm = max(1, scorer.cv.job.sample_slots // cls.mbs)
        for i, ((a, b), tp) in enumerate(zip(shape.bounds, cls.tps, strict=True)):
            stage = (a, b, cls.gpu, tp, cls.mbs, i, p, min(p - i, mm))
            if not scorer.replica_fits(*stage, 2):
                return False
            if not scorer.replica_fits(*stage, 1) and (of is None or of.replica_fits(*stage, 1)):
                return False
    return True


def by_position(tables: StageTables, p: int) -> list:
    """``best_splits`` wants index k = stages from here to the end (k = p - i)."""
    out = [None] * (p + 1)
    for i in range(p):
        out[p - i] = tables.cost[i]
    return out


def class_for(tables: StageTables, g: str, m: int, bounds: Bounds):
    """(class of type ``g`` on ``bounds``, its stage costs), or None where a stage has no
    degree that may fit (inf). A stage cost is the least per-microbatch step a pipeline of
    this class can take there: the table's cost holds the fastest p2p a stage can have (same
    zone, its own TP pairs)."""
    costs, tps = [], []
    for i, (a, b) in enumerate(bounds):
        cost = float(tables.cost[i][a, b])
        if not math.isfinite(cost):
            return None
        costs.append(cost)
        tps.append(int(tables.tp[i][a, b]))
    return ClassShape(g, m, tuple(tps)), tuple(costs)


def lower_bounds(costs, virtual: int = 1) -> tuple[float, float]:
    """(B, F) with every pipeline whose stage steps are at least ``costs`` taking >= M * B + F
    for M microbatches: 1F1B takes the sum of the steps plus M - 1 times the longest.

    With v virtual stages (``timing.pipeline_total``: own + (sum - own) / v of the compute,
    every boundary's p2p both ways once, M - 1 steady steps whose p2p counts v times) a
    pipeline takes >= (M - 1) B + sum / v: a cost ``c`` is compute plus one p2p per neighbour,
    the steady step is at least the largest, and the fill and drain hold every compute / v and
    every p2p at least / v. So F = sum / v - B, which may be negative (``Bounder`` allows it)."""
    neck = max(costs)
    return neck, sum(costs) / virtual - neck


def bottleneck(tables: StageTables, bounds: Bounds) -> float:
    return max(tables.cost[i][a, b] for i, (a, b) in enumerate(bounds))


def single_type_splits(
    tables: list[StageTables], p: int, exact_limit: int, n: int, suffixes=None
) -> list[list[Bounds]]:
    """Per table (configurations of one GPU type at depth p), the best splits for one class
    plus the even split (what a homogeneous planner uses); the DP runs on all at once.
    ``suffixes``: per table, the DP rows its configuration's other depths share (a base TP
    degree's tables: every position but the first depends on the stages after it alone,
    ``stage_tables``), or None."""
    found = best_splits_many([by_position(tab, p) for tab in tables], p, exact_limit, suffixes)
    even = even_bounds(n, p) if p <= n else None
    for tab, splits in zip(tables, found, strict=True):
        if even is not None and even not in splits and math.isfinite(bottleneck(tab, even)):
            splits.append(even)
    return found


def joint_splits(
    families: list[list[tuple[StageTables, float]]], p: int, exact_limit: int
) -> list[list[Bounds]]:
    """Per family of classes (each (stage tables, its own best bottleneck) of one GPU type),
    splits for those classes at once: each class's stage cost is normalised by its own best
    bottleneck, and the split minimises the largest normalised stage (balanced for every
    type). The DP runs on every family at once (``best_splits_many``)."""
    lists = []
    for members in families:
        costs = [None] * (p + 1)
        for i in range(p):
            worst = members[0][0].cost[i] / members[0][1]
            for tab, ref in members[1:]:
                np.maximum(worst, tab.cost[i] / ref, out=worst)
            costs[p - i] = worst
        lists.append(costs)
    return best_splits_many(lists, p, exact_limit)
