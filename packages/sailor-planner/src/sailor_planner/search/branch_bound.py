"""The search: pipeline depth x shapes (layer split, per-stage TP per GPU type, microbatch size)
x region layout x allocation (pipelines per class, zones, microbatches per pipeline).

Order of work, per pipeline depth P (shallow first):
1. per GPU type, per (microbatch size, base TP): stage tables (memoized) and the best layer
   splits of that type alone (``partition.best_splits``) plus the even split;
2. per mix of GPU types: a joint split of the best single-type configurations;
3. per shape and region layout, in order of a sound bound on the objective: allocations
   (``_allocations``), each placed, balanced and scored with the simulator's components.
A shape or allocation whose bound cannot beat the best candidate so far, or cannot meet a
constraint, is pruned without scoring. Afterwards a local search refines the best allocations.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Callable

from sailor_sim import SailorSimError, StageSlice, check_replica, get_gpu

from ..errors import RequestCancelledError, WorkLimitError
from ..provenance import beyond_profiles
from ..request import SearchOptions
from ..result import SearchStats
from .allocate import Scored, Scorer, place
from .bounds import Bounder
from .partition import Bounds, Suffixes
from .state import (
    Found,
    Memo,
    counts_of,
    fastest_zone,
    has_type,
    ladder,
    layout_of,
    min_price,
    region_groups,
    zone_orders,
)
from .templates import (
    ClassShape,
    Shape,
    StageTables,
    class_for,
    joint_splits,
    lower_bounds,
    single_type_splits,
    stage_tables,
)

EXACT_ALLOCATIONS = 256
"""Enumerate every pipelines-per-class vector while there are at most this many."""
KEEP_MARGIN = 2
"""Candidates kept exact beyond top_k, in case the simulator finds one of them out of memory."""
TP_VECTORS = 27
"""Per-stage TP vectors (``_tp_vector_tried``) tried while the degrees allow at most this
many vectors per (type, depth). There is no exact mode for small inventories: the
same search runs at every size, and bench/planner_optimality.py holds it to the optimum."""
MIX_TOP = {2: 3, 3: 1, 4: 1}
"""Single-type configurations per GPU type combined into mixed shapes, by number of types."""
SHAPE_MARGIN = 1e-9
"""Relative slack added to ``_shape_bound`` where it stands for the nodes of its layouts
(float rounding between it and ``Bounder.node_key``)."""
SHAPE = object()
"""The ``allocs`` field of a heap entry that holds a shape whose layout nodes are not built."""
LOOSE_SHAPE = object()
"""As SHAPE, keyed by the shape's bound without stage 0's sync (``_shape_bound`` with
``sync=False``): the sync's bound is computed only if the entry reaches the top of the heap,
then the entry goes back under its full key (most shapes never get there)."""
REFINE_STARTS = 3
"""Best distinct shapes the local search (``_refine``) walks from."""
POLL_S = 0.01
"""Seconds between two asks of ``should_stop``: a cancelled request stops well within 100 ms."""


def reads_only_the_best(options: SearchOptions) -> bool:
    """Whether the request reads only the kept best candidates: no Pareto frontier (drawn from
    every candidate scored) and no more candidates re-scored than the kept best holds. Work
    that cannot change the kept best is skipped only then."""
    return options.pareto_points == 0 and options.rescore <= KEEP_MARGIN


class Search:
    def __init__(
        self,
        cv,
        scorer: Scorer,
        memo: Memo,
        inventory,
        options: SearchOptions,
        incumbent: tuple[float, float] | None = None,
        should_stop: Callable[[], bool] | None = None,
        covered: Callable[[Shape], bool] | None = None,
        keep: int | None = None,
    ):
        """``incumbent``: (iterations/s, $/iteration) of a plan already known to be feasible
        (the previous plan on a re-plan); with top_k = 1 nothing worse is scored.
        ``should_stop``: asked every POLL_S inside every loop; True (the caller went away)
        ends the search with RequestCancelledError and drops everything it built.
        ``covered``: shapes another search already explored (skipped here).
        ``keep``: how many of the best candidates are kept exact (default top_k plus
        KEEP_MARGIN); the option search reads further down a relaxed search's order."""
        self.covered = covered
        self.should_stop = should_stop
        self._next_poll = 0.0
        self.cv, self.scorer, self.memo = cv, scorer, memo
        self.incumbent = incumbent if options.top_k == 1 else None
        # Skipping by the tighter bounds of a leaf (``_leaf_loses``) and of a placement
        # (``_ring_loses``, ``_draft_loses``) keeps the kept best exact.
        self.tight = reads_only_the_best(options)
        self.job = cv.job
        self.opt = options
        self.stats = SearchStats()
        keep = options.top_k + KEEP_MARGIN if keep is None else keep
        self.found = Found(options.objective, options.constraints, keep)
        self.partial = False
        self.refused: dict[str, None] = {}
        """The distinct reasons the job's options ruled shapes out (``_runs``; an ordered
        set): what a search that finds no plan says besides memory."""
        self.deadline = (
            time.monotonic() + options.deadline_s if options.deadline_s is not None else math.inf
        )
        self.free = {(p.gpu_type, p.zone): p.count for p in inventory.pools}
        self.types = [g for g in inventory.gpu_types if self.cv.supports(g) and self.cv.tp_of(g)]
        self.groups = region_groups(inventory, options.allow_cross_region_data_parallel)
        # Stage tables (splits and bounds) use each type's fastest zone: its bounds stay sound.
        self.ref_zone = {g: fastest_zone(self.cv.sim, g, self.free) for g in self.types}
        self.orders = zone_orders(self.groups, self.free, self.cv.sim, self.types)
        self.total = sum(self.free.values())
        self.bnd = Bounder(self.job, scorer, options, self.free, self.groups, self._poll)
        self._cross: dict[tuple, float] = {}
        self._lbs: dict[tuple, tuple] = {}
        self._shape_bounds: dict[tuple, float | None] = {}
        self._slow: dict[tuple, bool] = {}
        self._p2p: dict[tuple, float] = {}
        self._max_d: dict[tuple, list[int]] = {}
        self._gpus_in: dict[tuple, int] = {}
        self._most: dict[tuple, int] = {}
        """(depth, GPU types, a type) -> ``_most_gpus``."""
        self._placed: dict[tuple, tuple | None] = {}
        """(classes' GPU types and TPs, zones per stage, counts, stage-major) -> ``place``."""
        self._layouts_of: dict[tuple, list] = {}
        """(depth, GPU types of a shape's classes) -> ``_layouts``."""
        self._crossings: dict[tuple, list] = {}
        """(depth, GPU types) -> ``_crossing_points``."""
        self._virtual = self.job.options.virtual_stages

    # ---- driver ----------------------------------------------------------------------------
    def run(self) -> Found:
        """Best-first branch and bound: a heap of (shape, layout) nodes keyed by a bound over
        all their allocations, expanded into allocation leaves keyed by their own bound; the
        search ends when the best bound left cannot beat the best candidate scored."""
        n = self.cv.n
        depths = range(1, min(n, self.opt.max_pipeline_depth, self.total) + 1)
        heap: list = []
        tick = itertools.count()
        for p in depths:
            if self._late(have_work=bool(heap)):
                break
            singles = {g: self._single_shapes(g, p) for g in self.types}
            shapes = [x[0] for g in self.types for x in singles[g]]
            shapes += self._mixed_shapes(p, singles)
            for shape in shapes:
                if self._late(have_work=bool(heap)):  # a deadline binds within a depth too
                    break
                if self.covered is not None and self.covered(shape):
                    self.stats.pruned += 1
                    continue
                layouts = self._layouts(p, shape)
                if self.incumbent is not None and self._shape_beaten(shape, layouts):
                    # every layout's node would be beaten on its first pop (see _shape_bound)
                    self.stats.pruned += len(layouts)
                    continue
                key, kind = self._shape_key(shape, layouts)
                if key is not None:  # its layouts' nodes are built when this entry is popped
                    heapq.heappush(heap, (key, next(tick), shape, layouts, None, None, kind, 0, 0))
                    continue
                self._push_nodes(heap, tick, shape, layouts)
            if self.partial:
                break
        # Heap entries: (key, tick, shape, layout, lbs, max_d, allocs, lo, hi). A node has
        # allocs None. Expanded, its allocations form a list; where they are a path on which
        # every class only gains pipelines, a range lo..hi is bounded as a whole (pipelines of
        # its last, all-reduce and prices of its first allocation) and split in halves
        # (binary branch and bound); otherwise every allocation is bounded on its own. A range
        # lo..hi with hi < 0 is a bounded leaf ready to score: allocs[lo]. A shape whose
        # layouts share one bound (``_shape_bound``) enters as one entry with allocs SHAPE
        # (``layout`` then holds its layouts): its nodes are built when it is popped.
        while heap and not self._late(have_work=False):
            key, _, shape, layout, lbs, max_d, allocs, lo, hi = heapq.heappop(heap)
            if self._beaten(key):  # the best bound left: nothing can win any more
                self.stats.pruned += 1 + len(heap)
                break
            if allocs is LOOSE_SHAPE:  # back under its full key, unless it stays the best
                full = self._full_shape_key(shape, layout)
                if (heap and full > heap[0][0]) or self._beaten(full):
                    heapq.heappush(heap, (full, next(tick), shape, layout, None, None, SHAPE, 0, 0))
                    continue
                allocs = SHAPE
            if allocs is SHAPE:
                self._push_nodes(heap, tick, shape, layout)
                continue
            if allocs is None:
                allocs, path = self._allocations(shape, lbs, max_d)
                ranges = [(0, len(allocs) - 1)] if path else [(i, i) for i in range(len(allocs))]
            elif hi < 0:
                self._evaluate(shape, layout, allocs[lo], lbs if self.tight else None)
                continue
            else:
                mid = (lo + hi) // 2
                ranges = [(lo, mid), (mid + 1, hi)]
            for a, b in ranges:
                thr, cost, hourly = self.bnd.bounds(shape, lbs, allocs[b], fewest=allocs[a])
                if not self.bnd.meets(thr, cost, hourly):
                    self.stats.pruned += b - a + 1
                    continue
                sub = cost if self.opt.objective == "cost" else -thr
                entry = (a, -1) if a == b else (a, b)
                heapq.heappush(heap, (sub, next(tick), shape, layout, lbs, max_d, allocs, *entry))
        if not self.partial:
            self._refine()
        return self.found

    def _push_nodes(self, heap: list, tick, shape: Shape, layouts) -> None:
        """One heap node per region layout of ``shape`` that can hold a pipeline of every
        class and meet the constraints, keyed by ``Bounder.node_key``."""
        for layout in layouts:
            max_d = self._max_pipelines(shape, layout)
            if not any(max_d) or (len(max_d) > 1 and not all(max_d)):
                self.stats.pruned += 1
                continue
            lbs = [self._class_lb(shape, c, layout) for c in range(len(shape.classes))]
            key = self.bnd.node_key(shape, lbs, max_d)
            if key is None:
                self.stats.pruned += 1
                continue
            heapq.heappush(heap, (key, next(tick), shape, layout, lbs, max_d, None, 0, 0))

    def _poll(self) -> None:
        """Raise RequestCancelledError once ``should_stop`` says the caller gave up."""
        if self.should_stop is None:
            return
        now = time.monotonic()
        if now < self._next_poll:
            return
        self._next_poll = now + POLL_S
        if self.should_stop():
            raise RequestCancelledError(
                "the caller cancelled the request or its deadline passed; search stopped",
                field="request",
            )

    def _over_budget(self) -> bool:
        """True once ``max_candidates`` were scored; with none admitted yet that is an error
        (the request is too large for this server), not an endless search."""
        limit = self.opt.max_candidates
        if limit is None or self.stats.candidates_evaluated < limit:
            return False
        if self.found.best is None:
            raise WorkLimitError(
                f"scored {self.stats.candidates_evaluated} candidates (the limit) without a "
                "feasible plan; list fewer GPU pools or give a smaller inventory",
                field="inventory",
            )
        return True

    def _late(self, have_work: bool = True) -> bool:
        """Past the deadline or the candidate budget with something to show for it (a scored
        candidate, or nodes left to score): the search stops and the result is marked partial.
        Without either it goes on until it has one, so a deadline never turns a feasible
        request into no plan (a cancelled caller or the budget still stop it)."""
        self._poll()
        if self._over_budget():
            self.partial = True
            return True
        if time.monotonic() > self.deadline and (self.found.best is not None or have_work):
            self.partial = True
            return True
        return False

    # ---- shapes ----------------------------------------------------------------------------
    def _tables(self, g: str, p: int, m: int, t: int) -> StageTables | None:
        key = (g, p, m, t, self.ref_zone[g])
        if key in self.memo.tables:
            self.stats.memo_hits += 1
            return self.memo.tables[key]
        tab = stage_tables(self.cv, g, p, m, t, self.ref_zone[g], self._poll)
        self.memo.tables[key] = tab
        return tab

    def _tp_specs(self, g: str, p: int) -> list:
        """Base TP degrees (each stage takes the smallest that fits, raised where memory needs
        it), plus the per-stage TP vectors that a base degree cannot express, while the degrees
        allow at most TP_VECTORS (``_tp_vector_tried``): a wider early stage before narrower
        ones (early stages hold more microbatches in flight, so they need TP first; e.g.
        tp2|tp1 on 3 GPUs, which the base degrees 1 and 2 both miss), and a later stage at
        most twice as wide as the one before (the last stage holds the LM head and the loss:
        on 3 V100s OPT-350M's best 2-stage plan is tp1|tp2, 0.16 % faster than the best
        tp2|tp1 once attention's score traffic is counted)."""
        degrees = self.cv.tp_of(g)
        specs: list = list(degrees)
        if 1 < len(degrees) and len(degrees) ** p <= TP_VECTORS and p > 1:
            specs += [v for v in itertools.product(degrees, repeat=p) if _tp_vector_tried(v)]
        return specs

    def _single_shapes(self, g: str, p: int) -> list[tuple]:
        """(shape, samples/s per GPU, bottleneck, TP spec) of type g alone at depth p, best
        first (memoized: only the GPU total, capped where it stops mattering, enters the key)."""
        cap = min(self.total, p * max(self.cv.tp_of(g)))
        key = (g, p, self.ref_zone[g], self.opt.microbatch_sizes, self.opt.profiled_only)
        key += (self.opt.exact_partition_limit, cap)
        hit = self.memo.singles.get(key)
        if hit is None:
            hit = self.memo.singles[key] = self._single_shapes_uncached(g, p)
        else:
            self.stats.memo_hits += 1
        return hit

    def _single_shapes_uncached(self, g: str, p: int) -> list[tuple]:
        configs = self._single_tables(g, p)
        out = []
        for (m, t, tab), splits in zip(configs, self._splits(g, p, configs), strict=True):
            for bounds in splits:
                found = class_for(tab, g, m, bounds)
                if found is None:
                    continue
                cls, costs = found
                neck = max(costs)  # templates.bottleneck, from the costs read once
                shape = Shape(bounds, (cls,))
                self.memo.lbs[shape] = (costs,)
                out.append((shape, m / (neck * cls.gpus), neck, t))
        out.sort(key=lambda x: -x[1])
        return out

    def _single_tables(self, g: str, p: int) -> list[tuple]:
        """(microbatch size, TP spec, stage tables) of every configuration of type ``g`` at
        depth ``p`` that can run."""
        out = []
        for m in self.opt.microbatch_sizes:
            if m > self.job.sample_slots:
                continue
            for t in self._tp_specs(g, p):
                self._poll()
                if (sum(t) if isinstance(t, tuple) else p * t) > self.total:
                    continue
                if not self._runs(g, p, t):  # e.g. ZeRO-3 with pipelining, SP with tp 1
                    self.stats.pruned += 1
                    continue
                if self.opt.profiled_only and self._beyond_profiles(g, m, t):
                    self.stats.pruned += 1
                    continue
                tab = self._tables(g, p, m, t)
                if tab is None:
                    self.stats.pruned += 1
                    continue
                out.append((m, t, tab))
        return out

    def _splits(self, g: str, p: int, configs: list[tuple]) -> list[list]:
        """Per configuration its splits (memoized), those not known yet found together
        (``templates.single_type_splits``: one DP over all of them)."""
        limit = self.opt.exact_partition_limit
        keys = [(g, p, m, t, self.ref_zone[g], limit) for m, t, _tab in configs]
        missing = [i for i, key in enumerate(keys) if key not in self.memo.splits]
        self.stats.memo_hits += len(keys) - len(missing)
        tables = [configs[i][2] for i in missing]
        suffixes = [self._suffixes(g, *configs[i][:2]) for i in missing]
        found = single_type_splits(tables, p, limit, self.cv.n, suffixes)
        for i, splits in zip(missing, found, strict=True):
            self.memo.splits[keys[i]] = splits
        return [self.memo.splits[key] for key in keys]

    def _suffixes(self, g: str, m: int, t) -> Suffixes | None:
        """The split DP's rows shared by the depths of (g, m, base TP ``t``); None for a
        per-stage TP vector (its stages' degrees depend on the depth)."""
        if isinstance(t, tuple):
            return None
        return self.memo.suffixes.setdefault((g, m, t, self.ref_zone[g]), Suffixes())

    def _runs(self, g: str, p: int, t) -> bool:
        """Whether the job's execution options can run a depth-``p`` pipeline of type ``g``
        at TP spec ``t`` (``options.check_replica``, the simulator's own refusal): shapes it
        refuses are never scored, so they cannot crowd out or prune plans that run."""
        gpu = get_gpu(g)
        for tp in t if isinstance(t, tuple) else (t,):
            try:
                job = self.job
                check_replica(job.options, gpu, job.dtype, tp, p, job.local_sequence_length)
            except SailorSimError as exc:
                self.refused[str(exc)] = None
                return False
        return True

    def _beyond_profiles(self, g: str, m: int, t) -> bool:
        return any(
            beyond_profiles(self.cv.sim, self.job, g, m, tp)
            for tp in (t if isinstance(t, tuple) else (t,))
        )

    def _mixed_shapes(self, p: int, singles: dict) -> list[Shape]:
        picked = []  # (types, configuration per type) of every mixed shape family, in order
        types = [g for g in self.types if singles[g]]
        for size in range(2, len(types) + 1):
            for combo in itertools.combinations(types, size):
                if not any(all(has_type(self.free, g, grp) for g in combo) for grp in self.groups):
                    continue
                self._poll()
                k = MIX_TOP.get(size, 1)
                picks = [self._mix_picks(p, singles[g], k) for g in combo]
                picked += [(combo, choice) for choice in itertools.product(*picks)]
        return [shape for found in self._joint(p, picked) for shape in found]

    def _mix_picks(self, p: int, singles: list[tuple], k: int) -> list[tuple]:
        """The k configurations (mbs, TP spec, bottleneck) of one type a mixed shape combines:
        the fastest (``_single_shapes`` order) whose best split fits with as many replicas as
        the inventory's GPUs make of pipelines its size, then those that fit only with more
        (this pipeline plus depth-``p`` pipelines of TP 1 on every other GPU: ZeRO's largest
        shard group), then the rest. The simulator's own verdict, one microbatch in flight.
        The stage tables' bound shards over "all" GPUs, so under ZeRO the fastest
        configurations (large microbatches) pass it and took every mixed pick: LLaMA-3.1-70B
        at seq 8192 with ZeRO-1 on 16 H100 + 16 A100 found no plan, where one A100 and one
        H100 pipeline of TP 2 x PP 8 fit (2026-11-27)."""
        likely, possible, rest, seen = [], [], [], set()
        for shape, _rate, neck, spec in singles:
            cls = shape.classes[0]
            if (cls.mbs, spec) in seen:
                continue
            seen.add((cls.mbs, spec))
            if self._pipeline_fits(shape, p, max(1, self.total // cls.gpus)):
                likely.append((cls.mbs, spec, neck))
                if len(likely) == k:
                    break
            elif self._pipeline_fits(shape, p, 1 + max(0, self.total - cls.gpus) // p):
                possible.append((cls.mbs, spec, neck))
            else:
                rest.append((cls.mbs, spec, neck))
        return (likely + possible + rest)[:k]

    def _pipeline_fits(self, shape: Shape, p: int, d: int) -> bool:
        """Every stage of the one-class ``shape`` fits with one microbatch and ``d`` replicas."""
        cls = shape.classes[0]
        key = (shape.bounds, cls, d)
        ok = self.memo.may_fit.get(key)
        if ok is None:
            ok = self.memo.may_fit[key] = all(
                self.scorer.replica_fits(a, b, cls.gpu, tp, cls.mbs, i, p, 1, d)
                for i, ((a, b), tp) in enumerate(zip(shape.bounds, cls.tps, strict=True))
            )
        return ok

    def _joint(self, p: int, picked: list[tuple]) -> list[list[Shape]]:
        """Per (types, configuration per type) of ``picked`` its mixed shapes (memoized), those
        not known yet split together (``templates.joint_splits``: one DP over all of them)."""
        limit = self.opt.exact_partition_limit
        keys = [(p, combo, choice, limit) for combo, choice in picked]
        missing = [i for i, key in enumerate(keys) if key not in self.memo.joint]
        self.stats.memo_hits += len(keys) - len(missing)
        families = []
        for i in missing:
            combo, choice = picked[i]
            members = []
            for g, (m, t, ref) in zip(combo, choice, strict=True):
                members.append((self._tables(g, p, m, t), ref, g, m))
            families.append(members)
        self._poll()
        found = joint_splits([[(tab, ref) for tab, ref, _, _ in f] for f in families], p, limit)
        for i, members, splits in zip(missing, families, found, strict=True):
            out = []
            for bounds in splits:
                per_class = [class_for(tab, g, m, bounds) for tab, _, g, m in members]
                if all(c is not None for c in per_class):
                    shape = Shape(bounds, tuple(cls for cls, _costs in per_class))
                    self.memo.lbs[shape] = tuple(costs for _cls, costs in per_class)
                    out.append(shape)
            self.memo.joint[keys[i]] = out
        return [self.memo.joint[key] for key in keys]

    # ---- allocations -----------------------------------------------------------------------
    def _layouts(self, p: int, shape: Shape) -> list[tuple[tuple[str, ...], ...]]:
        """Region layouts of a depth-``p`` shape (zones each stage may use), by its GPU types
        alone (cached: every shape of a depth with those types shares them)."""
        gpus = tuple(c.gpu for c in shape.classes)
        out = self._layouts_of.get((p, gpus))
        if out is None:
            ok = [grp for grp in self.groups if all(has_type(self.free, g, grp) for g in gpus)]
            out = [(grp,) * p for grp in ok]
            if p > 1 and len(ok) > 1:  # pipelines crossing one region boundary, either way
                for a, b in itertools.permutations(ok[:2], 2):
                    out += [(a,) * q + (b,) * (p - q) for q in range(1, p)]
            self._layouts_of[(p, gpus)] = out
        return out

    def _evaluate(self, shape: Shape, layout, counts, lbs=None) -> Scored | None:
        """Score an allocation under both placements (when they differ); the better one.
        With ``lbs`` (its node's ``_class_lb`` per class) it skips what its own bounds rule
        out (``_loses``)."""
        self._poll()
        start = time.perf_counter()
        try:
            return self._evaluate_placements(shape, layout, counts, lbs)
        finally:
            self.stats.scoring_s += time.perf_counter() - start

    def _evaluate_placements(self, shape: Shape, layout, counts, lbs) -> Scored | None:
        best = None
        prune = lbs is not None
        if prune:
            floors = [self._class_floor(shape, c) for c in range(len(shape.classes))]
            if self._leaf_loses(shape, floors, counts, layout):
                self.stats.pruned += 1
                return None
        placements, seen = [], set()
        for order in self.orders:  # zones of a region in each order that may matter
            zones = tuple(order[grp] for grp in layout)
            placements.append(self._place(shape, zones, counts))
            if shape.depth > 1 and any(len(grp) > 1 for grp in layout):
                placements.append(self._place(shape, zones, counts, stage_major=True))
        for groups in placements:
            if groups is None:
                self.stats.infeasible += 1
                continue
            if groups in seen:
                continue
            seen.add(groups)
            if prune and self._ring_loses(shape, floors, counts, groups):
                self.stats.pruned += 1
                continue
            draft = self.scorer.draft(shape, groups)
            if prune and self._draft_loses(draft):
                self.stats.pruned += 1
                continue
            s = self.scorer.finish(draft, layout)
            self.stats.candidates_evaluated += 1
            if s is None or not self.found.add(s):
                self.stats.infeasible += 1
                continue
            if best is None or self.found.key(s) < self.found.key(best):
                best = s
        return best

    def _place(self, shape: Shape, zones, counts, stage_major: bool = False):
        """``allocate.place`` over the search's inventory, cached: it depends on a shape only
        through its classes' GPU types and TP degrees, which many shapes of a depth share
        (65 % of the 4096-GPU case's placements are repeats). None (no placement fits) is an
        answer too, so a miss is marked False."""
        key = (tuple((c.gpu, c.tps) for c in shape.classes), zones, counts, stage_major)
        hit = self._placed.get(key, False)
        if hit is False:
            hit = self._placed[key] = place(shape, zones, counts, self.free, stage_major)
        return hit

    def _leaf_loses(self, shape: Shape, floors, counts, layout) -> bool:
        """``_loses`` on a bound of every placement of a leaf, before any: pipelines without
        p2p (``_class_floor``) and stage 0's sync at least ``Bounder.spanning_ring`` (where
        stage 0's replicas cannot fit in one zone of its region: the Sailor fits' edges
        between zones are 8x slower)."""
        ring = self.bnd.spanning_ring(shape, counts, layout[0])
        return self._loses(*self.bnd.bounds(shape, floors, counts, ring=ring))

    def _ring_loses(self, shape: Shape, floors, counts, groups) -> bool:
        """``_loses`` on a cheaper bound than ``_draft_loses``'s, first: pipelines without
        p2p (``_class_floor``) and this placement's own stage-0 sync (``Scorer.first_ring``),
        before any group's timing is computed (placing whole pipelines in zones often splits
        stage 0's ring across zones)."""
        ring = self.scorer.first_ring(shape, groups)
        return self._loses(*self.bnd.bounds(shape, floors, counts, ring=ring))

    def _class_floor(self, shape: Shape, c: int) -> tuple[float, float, float]:
        """(B, F, optimizer step of stage 0) of class ``c`` with no p2p at all: the tables'
        stage costs less every neighbour's same-zone p2p they count. Unlike ``_class_lb`` it
        rests on no assumption about links (the Sailor fits' us-central1-a -> b p2p beats
        both zones' own); cached."""
        key = ("floor", shape, c)
        hit = self._lbs.get(key)
        if hit is None:
            p2p = self._neighbour_p2p(shape.classes[c], self._same_zone_p2p)
            costs = [cost - x for cost, x in zip(self.memo.lbs[shape][c], p2p, strict=True)]
            opt = self._class_base(shape, c)[2]
            hit = self._lbs[key] = (*lower_bounds(costs, self._virtual), opt)
        return hit

    def _draft_loses(self, draft) -> bool:
        """Whether a placement cannot meet the constraints or beat the kept best, by
        ``Scorer.bound`` (its own groups' timing and stage 0's ring, before balancing): the
        same test as a leaf's, on a bound at least as tight (a leaf's bound holds for every
        placement of it; this one for one placement)."""
        return self._loses(*self.scorer.bound(draft))

    def _loses(self, thr: float, cost: float, hourly: float) -> bool:
        """Whether bounds (iterations/s at most, $/iteration and $/hour at least) of a leaf
        or placement rule it out: it cannot meet the constraints, or beat neither the kept
        best nor the best candidate of the REFINE_STARTS-th best shape.

        Why skipping it changes no answer: the heap keys are those of a search without
        these skips, and what it pops depends only on them and the kept best, which a
        candidate that cannot beat it leaves as it is; so the same entries are popped. The
        second condition keeps what ``_refine`` starts from: a candidate that cannot beat
        that one is not the best of a shape among the REFINE_STARTS best (shapes' bests only
        improve). Candidates that could meet neither change only what is never ranked."""
        if not self.bnd.meets(thr, cost, hourly):
            return True
        key = cost if self.opt.objective == "cost" else -thr
        start = self.found.shape_threshold(REFINE_STARTS)
        return start is not None and self._beaten(key) and self._worse(key, start)

    def _worse(self, key: float, s: Scored) -> bool:
        """Whether heap key ``key`` (a bound) cannot beat candidate ``s`` (as ``_beaten``)."""
        if self.opt.objective == "cost":
            return key > s.cost_per_iteration * (1 + 1e-9)
        return -key < s.throughput * (1 - 1e-9)

    def _class_lb(self, shape: Shape, c: int, layout) -> tuple[float, float, float]:
        """(B, F, optimizer step of stage 0) of a class on a region layout: a pipeline of it
        takes at least M * B + F (``templates.lower_bounds``), and stage 0 steps its optimizer
        after it. The tables count each neighbour's p2p on the reference zone's link, which is
        not the fastest at every size where links cross (the Sailor fits: us-central1-b's A100
        link beats -a's at some sizes, -a is the reference; -a -> -b beats both): each stage's
        step is lowered to the fastest p2p of the type between any two of its zones. Where the
        layout crosses regions, the two stages at that boundary send over the fastest link
        between the regions instead."""
        cls = shape.classes[c]
        hit = self._class_base(shape, c)
        if layout[0] == layout[-1]:  # one region (layouts cross a boundary at most once)
            return hit[:3]
        costs = list(hit[3])
        for q in range(1, shape.depth):
            if layout[q] != layout[q - 1]:
                extra = self._cross_extra(cls, q, layout[q - 1], layout[q])
                costs[q - 1] += extra[0]
                costs[q] += extra[1]
        return (*lower_bounds(costs, self._virtual), hit[2])

    def _shape_beaten(self, shape: Shape, layouts) -> bool:
        """Whether ``_shape_bound`` (over every layout) already loses to the incumbent, with
        a SHAPE_MARGIN on top of ``_beaten``'s own (float rounding between the two bounds);
        the bound without the sync first (looser: where it loses, so does the full one)."""
        floor = self.incumbent[0] * (1 - 1e-9)
        loose = self._shape_bound(shape, layouts, sync=False)
        if loose is None or loose * (1 + SHAPE_MARGIN) < floor:
            return loose is not None
        return self._shape_bound(shape, layouts) * (1 + SHAPE_MARGIN) < floor

    def _shape_key(self, shape: Shape, layouts) -> tuple[float | None, object]:
        """(A heap key no worse than the node key (``Bounder.node_key``) of any layout of
        ``shape``, or None where none is known (then its nodes are built at once); the kind of
        its heap entry, SHAPE or LOOSE_SHAPE).
        Throughput: ``_shape_bound`` without the sync, a LOOSE_SHAPE entry
        (``_full_shape_key`` once it reaches the top). Cost (without interleaving, where
        every region crossing only slows a stage, ``_crossings_slow``): ``Bounder._cost_floor``
        of the one-region (B, F) of each class: a crossing adds x, y >= 0 to two stage steps,
        so B grows and F = sum - B grows by x + y - (growth of B) >= x + y - max(x, y) >= 0,
        and the floor (the least per-sample price times B, plus the bill times the least F)
        only grows. Both are moved by SHAPE_MARGIN towards better (float rounding)."""
        if self.opt.objective == "throughput":
            if len(layouts) == 1:  # its one node costs what its bound does: built at once
                return None, SHAPE
            thr = self._shape_bound(shape, layouts, sync=False)
            return (None if thr is None else -thr * (1 + SHAPE_MARGIN)), LOOSE_SHAPE
        if self._virtual != 1 or not layouts:
            return None, SHAPE
        if not all(self._crossings_slow(shape, cls, layouts) for cls in shape.classes):
            return None, SHAPE
        lbs = [self._class_base(shape, c)[:3] for c in range(len(shape.classes))]
        return self.bnd._cost_floor(shape, lbs, None) * (1 - SHAPE_MARGIN), SHAPE

    def _full_shape_key(self, shape: Shape, layouts) -> float:
        """The throughput key of a LOOSE_SHAPE entry with stage 0's sync bounded: the key
        ``_shape_key`` would give it, were its sync free to compute. Popping entries by these
        keys builds the same nodes in the same order as keying every shape fully: a loose
        key is no worse than its full one, and an entry whose full key is not the best left
        goes back to wait for its turn."""
        return -self._shape_bound(shape, layouts) * (1 + SHAPE_MARGIN)

    def _shape_bound(self, shape: Shape, layouts, sync: bool = True) -> float | None:
        """An upper bound on iterations/s over the node keys of all ``layouts`` of ``shape``
        (``Bounder.node_key``, throughput objective), computed once for the shape, or None
        where none is given (cost objective, interleaving, a crossing that speeds a stage up).
        ``sync=False``: with stage 0's sync taken as 0 (a looser bound, much cheaper: the
        sync's bound rings through the zones).

        Why a skipped shape changes no answer: the incumbent is fixed and the nodes are all
        pushed before the first pop, so a node the incumbent beats would end the search when
        popped (``_beaten``), after exactly the entries that precede it; without it the next
        pop, whose key is no better, ends it instead.

        Why building a shape's layout nodes only when its entry (keyed by this bound, raised
        by SHAPE_MARGIN) is popped changes no answer: every node it holds has a key no better
        than the entry's, so the entry pops before any of them would have, and its nodes are
        in the heap before their turn; an entry that is ``_beaten`` ends the search as the
        best of its nodes would have. Only the order among nodes of exactly equal keys (and
        the ``pruned`` count) can differ.

        Why it bounds every layout: a layout's classes have the single-region stage costs
        plus what crossing regions adds (``_class_lb``; checked >= 0 here, so B and the sum
        of the steps, B + F without interleaving, only grow), and at most D = min(samples /
        mbs, the GPUs of the type in the region groups of a layout / the GPUs of one
        pipeline) pipelines (``_max_pipelines`` gives a layout no more). One class: the node
        key is ``bounds`` at 1 and at max_d pipelines, and ``bounds``'s time, gbs B / (d
        mbs) + F (gbs >= d mbs) and the optimizer shard, falls as d grows and rises with B
        and B + F: evaluated at D with the single-region costs it is no smaller. Several
        classes: T >= max(gbs / sum_j D_j mbs_j / B_j + min_j F_j, max_j (B_j + F_j)) + sync
        + optimizer (the samples' weighted mean of F is at least its least; the sync is the
        layout-independent two-replica ring of ``bounds``), each term at most what the
        layout's ``bounds`` has."""
        if self.opt.objective != "throughput" or self._virtual != 1 or not layouts:
            return None
        key = (shape, len(layouts), sync)  # a shape's layouts follow from its depth and types
        if key in self._shape_bounds:
            return self._shape_bounds[key]
        thr = self._shape_bounds[key] = self._shape_bound_uncached(shape, layouts, sync)
        return thr

    def _shape_bound_uncached(self, shape: Shape, layouts, sync: bool) -> float | None:
        lbs = []
        for c, cls in enumerate(shape.classes):
            if not self._crossings_slow(shape, cls, layouts):
                return None
            lbs.append(self._class_base(shape, c)[:3])
        # Per class, at most the GPUs of the type in a layout's region groups over one
        # pipeline's GPUs (each layout's node has its own, ``_max_pipelines``, no more).
        step, caps = self.scorer.step(shape.depth), []
        for cls in shape.classes:
            most = self._most_gpus(shape, cls.gpu, layouts)
            caps.append(min(most // cls.gpus, self.job.sample_slots // (cls.mbs * step)))
        if not all(caps):
            return None  # a class with no pipeline anywhere: the per-layout path prunes it
        bnd = self.bnd
        ring = None if sync else 0.0  # ``bounds``'s sync: its ring bound, or none
        if len(caps) == 1:
            thr = bnd.bounds(shape, lbs, [1], sync_replicas=1, ring=ring)[0]
            if caps[0] >= 2:
                thr = max(thr, bnd.bounds(shape, lbs, caps, sync_replicas=2, ring=ring)[0])
            return thr
        gbs = self.job.sample_slots
        pairs = zip(caps, shape.classes, lbs, strict=True)
        rate = sum(d * cls.mbs / b for d, cls, (b, _f, _o) in pairs)
        least_f = min(f for _b, f, _o in lbs)
        longest = max(b + f for b, f, _o in lbs)
        opt = max(o for _b, _f, o in lbs)
        kinds = tuple(sorted(((cls.gpu, cls.tps[0]), 1) for cls in shape.classes))
        ring = bnd._fastest_ring(shape, kinds) if sync else 0.0
        if self.job.options.zero == "hybrid":
            ring = 0.0
        if self.job.options.shards_optimizer:
            opt /= max(1, sum(caps))
        return 1.0 / (max(gbs / rate + least_f, longest) + ring + opt)

    def _most_gpus(self, shape: Shape, g: str, layouts) -> int:
        """The most GPUs of type ``g`` the region groups of one of ``layouts`` hold (cached
        per depth and GPU types, which the layouts follow from)."""
        key = (shape.depth, tuple(c.gpu for c in shape.classes), g)
        hit = self._most.get(key)
        if hit is None:
            spans = {frozenset(layout) for layout in layouts}
            hit = self._most[key] = max(
                sum(self._region_gpus(g, grp) for grp in span) for span in spans
            )
        return hit

    def _crossings_slow(self, shape: Shape, cls: ClassShape, layouts) -> bool:
        """Whether every region crossing of ``layouts`` (those of ``shape``) adds >= 0 to both
        stages at it (``_cross_extra``, measured against the fastest p2p of the type); cached:
        a shape's layouts follow from its depth and GPU types."""
        gpus = tuple(c.gpu for c in shape.classes)
        key = (cls, gpus)
        hit = self._slow.get(key)
        if hit is None:
            points = self._crossing_points(shape.depth, gpus, layouts)
            hit = self._slow[key] = self._crossings_slow_uncached(cls, points)
        return hit

    def _crossing_points(self, p: int, gpus: tuple, layouts) -> list[tuple]:
        """(boundary q, region group before, after) of every crossing in ``layouts``, each
        once (cached per depth and GPU types, as ``_layouts``): a class's check then reads
        these few instead of walking every stage of every layout (the 4096-GPU case's
        shapes have up to 33 layouts of 16 stages)."""
        hit = self._crossings.get((p, gpus))
        if hit is None:
            points = {
                (q, layout[q - 1], layout[q])
                for layout in layouts
                for q in range(1, len(layout))
                if layout[q] != layout[q - 1]
            }
            hit = self._crossings[(p, gpus)] = sorted(points, key=lambda x: x[0])
        return hit

    def _crossings_slow_uncached(self, cls: ClassShape, points) -> bool:
        checked = set()  # what a crossing adds depends on its TP pair and regions only
        for q, src, dst in points:
            crossing = (cls.tps[q - 1 : q + 1], src, dst)
            if crossing in checked:
                continue
            checked.add(crossing)
            extra = self._cross_extra(cls, q, src, dst)
            if extra[0] < 0 or extra[1] < 0:
                return False
        return True

    def _class_base(self, shape: Shape, c: int) -> tuple:
        """(B, F, optimizer step, stage costs) of class ``c`` in one region (cached)."""
        key = (shape, c)
        hit = self._lbs.get(key)
        if hit is None:
            cls = shape.classes[c]
            costs = self._fastest_costs(shape, c)
            (a, last), tp = shape.bounds[0], cls.tps[0]
            opt = self.cv.sim.stage_time(
                self.job, StageSlice(a, last, cls.gpu, tp, cls.mbs)
            ).optimizer_s
            hit = self._lbs[key] = (*lower_bounds(costs, self._virtual), opt, costs)
        return hit

    def _fastest_costs(self, shape: Shape, c: int) -> tuple[float, ...]:
        """The tables' stage costs with every neighbour's p2p at the fastest link between two
        zones of the type (``_p2p_slack``)."""
        slack = self._neighbour_p2p(shape.classes[c], self._p2p_slack)
        return tuple(cost - x for cost, x in zip(self.memo.lbs[shape][c], slack, strict=True))

    def _neighbour_p2p(self, cls: ClassShape, per_neighbour) -> tuple[float, ...]:
        """Per stage of a pipeline of ``cls``: its neighbours times ``per_neighbour(GPU, mbs,
        TP)`` seconds (``_same_zone_p2p``, ``_p2p_slack``); cached per class, which the shapes
        of every split share."""
        key = (cls, per_neighbour.__name__)
        hit = self._p2p.get(key)
        if hit is None:
            p = len(cls.tps)
            hit = self._p2p[key] = tuple(
                ((i > 0) + (i < p - 1)) * per_neighbour(cls.gpu, cls.mbs, tp)
                for i, tp in enumerate(cls.tps)
            )
        return hit

    def _p2p_slack(self, g: str, m: int, tp: int) -> float:
        """How much the tables' same-zone p2p (reference zone) exceeds the fastest p2p of type
        ``g`` between any two zones holding it (``_fastest_p2p``)."""
        key = ("slack", g, m, tp)
        hit = self._p2p.get(key)
        if hit is None:
            hit = self._p2p[key] = self._same_zone_p2p(g, m, tp) - self._fastest_p2p(g, m, tp)
        return hit

    def _fastest_p2p(self, g: str, m: int, tp: int) -> float:
        """The fastest p2p of type ``g`` at TP ``tp`` from any zone holding it to any zone
        holding it, the same or another: a pipeline's neighbours may sit in two zones whose
        link beats both zones' own (the Sailor fits' us-central1-a -> b does), so the fastest
        same-zone link alone is no lower bound."""
        key = ("fastest", g, m, tp)
        hit = self._p2p.get(key)
        if hit is None:
            zones = sorted(z for (t, z), n in self.free.items() if t == g and n > 0)
            hit = math.inf
            for a in zones:  # every pair, 1,600 over 40 zones: a first link is ms of work
                for b in zones:
                    self._poll()
                    hit = min(hit, self._zone_p2p(g, a, m, tp, b))
            self._p2p[key] = hit
        return hit

    def _zone_p2p(self, g: str, z: str, m: int, tp: int, to: str | None = None) -> float:
        """One microbatch's p2p of type ``g`` at TP ``tp`` from zone ``z`` to zone ``to``
        (default: the same zone)."""
        if self.cv.n <= 1:
            return 0.0
        r = self.scorer.replica(g, z, tp, m)
        dst = r if to is None or to == z else self.scorer.replica(g, to, tp, m)
        return self.cv.sim.p2p_time(self.job, 0, r, dst)

    def _cross_extra(self, cls: ClassShape, q: int, src, dst) -> tuple[float, float]:
        """What crossing from region group ``src`` to ``dst`` at boundary ``q`` adds to the
        steps of stages q - 1 and q beyond the fastest p2p (``_fastest_p2p``): the fastest p2p
        between a zone of each, one pipeline alone (more share the NICs). The boundary's layer
        id does not change the tensor sent (``Simulator.p2p``), so it is not part of the key."""
        tps = cls.tps[q - 1 : q + 1]
        key = (cls.gpu, cls.mbs, tps, src, dst)
        hit = self._cross.get(key)
        if hit is None:
            g = cls.gpu
            cross = math.inf
            for za in (z for z in src if self.free.get((g, z), 0)):
                for zb in (z for z in dst if self.free.get((g, z), 0)):
                    self._poll()
                    a = self.scorer.replica(g, za, tps[0], cls.mbs)
                    b = self.scorer.replica(g, zb, tps[1], cls.mbs)
                    # as the tables' p2p (boundary 0): every boundary sends the same tensor
                    cross = min(cross, self.cv.sim.p2p_time(self.job, 0, a, b))
            hit = self._cross[key] = tuple(cross - self._fastest_p2p(g, cls.mbs, tp) for tp in tps)
        return hit

    def _same_zone_p2p(self, g: str, m: int, tp: int) -> float:
        """The p2p seconds the stage tables of type ``g`` count per neighbour at TP ``tp``."""
        key = ("table", g, m, tp)
        hit = self._p2p.get(key)
        if hit is None:
            hit = self._p2p[key] = self._zone_p2p(g, self.ref_zone[g], m, tp)
        return hit

    def _max_pipelines(self, shape: Shape, layout) -> list[int]:
        """Bound on useful data parallelism per class: capacity per region, and at least one
        microbatch per pipeline (p of them under interleaved 1F1B, whose counts are multiples
        of p: ``Scorer.step``); depends on the classes and the layout only: cached."""
        key = (shape.classes, layout)
        hit = self._max_d.get(key)
        if hit is None:
            hit = self._max_d[key] = self._max_pipelines_uncached(shape, layout)
        return list(hit)

    def _max_pipelines_uncached(self, shape: Shape, layout) -> list[int]:
        out, step = [], self.scorer.step(shape.depth)
        for cls in shape.classes:
            need: dict = {}
            for grp, tp in zip(layout, cls.tps, strict=True):
                need[grp] = need.get(grp, 0) + tp
            cap = min(self._region_gpus(cls.gpu, grp) // k for grp, k in need.items())
            out.append(min(cap, self.job.sample_slots // (cls.mbs * step)))
        return out

    def _region_gpus(self, g: str, grp) -> int:
        """GPUs of type ``g`` free in the zones of region group ``grp``."""
        key = (g, grp)
        hit = self._gpus_in.get(key)
        if hit is None:
            hit = self._gpus_in[key] = sum(self.free.get((g, z), 0) for z in grp)
        return hit

    def _beaten(self, key: float) -> bool:
        refs = []
        best = self.found.threshold
        if best is not None:
            refs.append((best.throughput, best.cost_per_iteration))
        if self.incumbent is not None:
            refs.append(self.incumbent)
        if self.opt.objective == "cost":
            return any(key > cost * (1 + 1e-9) for _, cost in refs)
        return any(-key < thr * (1 - 1e-9) for thr, _ in refs)

    def _allocations(self, shape: Shape, lower, max_d: list[int]) -> tuple[list, bool]:
        """(pipelines-per-class vectors, whether they form a path on which no class loses
        pipelines). Every vector while there are few (not a path); otherwise a ladder per class,
        filling classes in order of $ per sample (the optimum of the linear relaxation)."""
        mixed = len(shape.classes) > 1
        lo = 1 if mixed else 0
        if math.prod(d - lo + 1 for d in max_d) <= EXACT_ALLOCATIONS:
            grid = itertools.product(*(range(lo, d + 1) for d in max_d))
            return [c for c in grid if any(c)], len(max_d) == 1
        order = sorted(
            range(len(max_d)),
            key=lambda c: (
                shape.classes[c].gpus
                * min_price(shape.classes[c].gpu)
                * lower[c][0]
                / shape.classes[c].mbs
            ),
        )
        out, seen = [], set()
        for pos, c in enumerate(order):
            self._poll()
            for d in ladder(max_d[c], lo):
                counts = [0] * len(max_d)
                for earlier in order[:pos]:
                    counts[earlier] = max_d[earlier]
                for later in order[pos + 1 :]:
                    counts[later] = lo
                counts[c] = d
                counts = tuple(counts)
                if any(counts) and counts not in seen:
                    seen.add(counts)
                    out.append(counts)
        return out, True

    def _refine(self, rounds: int = REFINE_STARTS, steps: int = 30) -> None:
        """Local search on pipelines per class around the best distinct candidates."""
        if not self.found.admitted:
            return
        starts, seen = [], set()
        for s in sorted(self.found.admitted, key=self.found.key):
            if s.shape not in seen:
                seen.add(s.shape)
                starts.append(s)
            if len(starts) == rounds:
                break
        for s in starts:
            layout = layout_of(s)
            counts = counts_of(s)
            max_d = self._max_pipelines(s.shape, layout)
            current = s
            for _ in range(steps):
                if self._late():
                    return
                improved = False
                for c, delta in itertools.product(range(len(counts)), (-4, -2, -1, 1, 2, 4)):
                    trial = list(counts)
                    trial[c] += delta
                    if not 0 <= trial[c] <= max_d[c] or not any(trial):
                        continue
                    new = self._evaluate(s.shape, layout, tuple(trial))
                    if new is not None and self.found.key(new) < self.found.key(current):
                        current, counts, improved = new, tuple(trial), True
                if not improved:
                    break


def _tp_vector_tried(v: tuple[int, ...]) -> bool:
    """Mixed per-stage TP vectors worth a configuration: any that narrows along the pipeline
    (memory), and any that widens at most 2x per stage (a heavier last stage: the LM head).
    Every mix costs 25 % more search on 4096 GPUs for no better answer in any bench case."""
    if len(set(v)) == 1:
        return False
    narrows = all(a >= b for a, b in itertools.pairwise(v))
    return narrows or all(b <= 2 * a for a, b in itertools.pairwise(v))


__all__ = ["Bounds", "ClassShape", "Memo", "Search"]
