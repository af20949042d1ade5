"""Bounds that keep the 4096-GPU search short (issue 22): a leaf's spanning ring
(``Bounder.spanning_ring``: where stage 0's replicas cannot fit in one zone, the ring's slowest
edge between zones) and a placement's own bounds before it is balanced (its stage-0 ring,
``Search._ring_loses``; its groups' timing, ``Scorer.bound``). Each
must never promise less than a scored candidate reaches (the Sailor fits' edges between zones
are asymmetric: every edge into us-central1-a is fast), must prune, and must change no
answer."""

import dataclasses
import heapq
import itertools

import pytest

from sailor_planner.planner import Planner
from sailor_planner.request import Constraints, SearchOptions
from sailor_planner.search import branch_bound
from sailor_planner.search.allocate import Scorer, place
from sailor_planner.search.bounds import Bounder
from sailor_planner.search.branch_bound import REFINE_STARTS, Memo, Search
from sailor_planner.search.costs import CostView
from sailor_sim import ExecutionOptions, Inventory, Job

CENTRAL = ("us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f")
SMALL_ZONES = [f"{g}@{z}={n}" for g, n in (("A100-40", 8), ("GH-96", 4)) for z in CENTRAL]
"""Two types in the four zones of one region, few GPUs per zone: rings span zones early."""


@pytest.mark.parametrize("source", ["sim", "sailor_planner"])
def test_leaf_bounds_with_the_spanning_ring_hold_for_every_scored_candidate(request, source):
    """A leaf's skip bound (``Search._leaf_loses``: pipelines without p2p, stage 0's sync at
    least ``spanning_ring``) holds for every placement of it, with and without mixed types."""
    sim = request.getfixturevalue(source)
    sim = getattr(sim, "sim", sim)  # the planner fixture holds its simulator
    job = Job.create("OPT-350M", 64, 2048, "fp32")
    cv = CostView(sim, job)
    options = SearchOptions(microbatch_sizes=(1, 2))
    search = Search(cv, Scorer(cv), Memo(), Inventory.parse(SMALL_ZONES), options)
    checked, tighter = 0, 0
    for shape, layout, floors in _shape_layouts(search, (1, 2, 3), singles=4, mixed=6):
        max_d = search._max_pipelines(shape, layout)
        lo = 1 if len(max_d) > 1 else 0
        for counts in itertools.product(*(range(lo, d + 1) for d in max_d)):
            if not any(counts):
                continue
            ring = search.bnd.spanning_ring(shape, counts, layout[0])
            thr, cost, _ = search.bnd.bounds(shape, floors, counts, ring=ring)
            for groups in _placements(search, shape, layout, counts):
                scored = search.scorer.score(shape, groups, layout)
                if scored is None:
                    continue
                assert scored.throughput <= thr * (1 + 1e-9), (shape, groups)
                assert scored.cost_per_iteration >= cost * (1 - 1e-9), (shape, groups)
                checked += 1
                tighter += ring > 0
    assert checked >= 200 and tighter >= 20, (checked, tighter)


def test_the_spanning_ring_skips_leaves_and_changes_no_answer(sailor_planner, monkeypatch):
    """With the bound and without it (0 s for every ring): the same plans and estimates for
    both objectives, and fewer placements built with it (``Search._leaf_loses`` skips a leaf
    before placing it)."""
    job = Job.create("OPT-350M", 256, 2048, "fp32")
    inventory = Inventory.parse(SMALL_ZONES)
    placed = []

    def counting(*args, **kwargs):
        placed.append(1)
        return place(*args, **kwargs)

    monkeypatch.setattr(branch_bound, "place", counting)

    def answers():
        out = []
        placed.clear()
        for objective in ("throughput", "cost"):
            r = Planner(sailor_planner.sim).plan(job, inventory, SearchOptions(objective=objective))
            out.append([(p.plan.to_json(), p.estimate, p.options) for p in r.plans])
        return out, len(placed)

    with_bound, fewer = answers()
    monkeypatch.setattr(Bounder, "spanning_ring", lambda self, shape, counts, zones: 0.0)
    without, more = answers()
    assert without == with_bound
    assert fewer < more, (fewer, more)


@pytest.mark.parametrize(
    "options",
    [
        ExecutionOptions(),
        ExecutionOptions(zero="zero1"),
        ExecutionOptions(zero="zero3"),
        ExecutionOptions(zero="hybrid"),
        ExecutionOptions(virtual_stages=2),
        ExecutionOptions(recompute="full"),
    ],
    ids=["plain", "zero1", "zero3", "hybrid", "v2", "recompute"],
)
@pytest.mark.parametrize("source", ["sim", "sailor_planner"])
def test_a_placements_bound_holds_for_its_score(request, source, options):
    """``Scorer.bound`` of every placement (both orders, one-type and mixed shapes, in one
    region and across a region boundary), and the bound with pipelines without p2p and the
    placement's own stage-0 ring (``Search._ring_loses``), are at least the throughput it
    scores and at most its $/iteration and $/hour."""
    sim = request.getfixturevalue(source)
    sim = getattr(sim, "sim", sim)
    job = Job.create("OPT-350M", 64, 2048, "fp32", options=options)
    inventory = Inventory.parse(SMALL_ZONES + ["A100-40@us-west1-b=8"])
    cv = CostView(sim, job)
    search = Search(cv, Scorer(cv), Memo(), inventory, SearchOptions(microbatch_sizes=(1, 2)))
    checked, mixed, crossing = 0, 0, 0
    for shape, layout, floors in _shape_layouts(search, (1, 2, 4), singles=3, mixed=4):
        for counts in _some_counts(search._max_pipelines(shape, layout)):
            for groups in _placements(search, shape, layout, counts):
                draft, scored, ring = _scored(search, shape, layout, groups)
                if scored is None:
                    continue
                for thr, cost, hourly in (
                    search.scorer.bound(draft),
                    search.bnd.bounds(shape, floors, counts, ring=ring),
                ):
                    where = (shape, groups)
                    assert scored.throughput <= thr * (1 + 1e-9), where
                    assert scored.cost_per_iteration >= cost * (1 - 1e-9), where
                    assert scored.cost_per_hour >= hourly * (1 - 1e-9), where
                if options.shards_gradients:  # one microbatch count for every pipeline
                    assert len({(x.base, x.top) for x in scored.loads}) == 1, where
                checked += 1
                mixed += len(shape.classes) > 1
                crossing += layout[0] != layout[-1]
    one_stage = options.zero in ("zero3", "hybrid")  # sharded weights: no pipelining
    # ZeRO-3 / hybrid score only the counts that divide the batch evenly
    least = (30, 5) if options.shards_gradients else (50, 10)
    assert checked >= least[0] and mixed >= least[1], (checked, mixed)
    assert one_stage or crossing >= 10, crossing


def _shape_layouts(search, depths, singles: int, mixed: int):
    """(shape, layout, per-class floors) for the best ``singles`` one-type shapes of every
    type and the best ``mixed`` mixed shapes at each depth, over every layout of each."""
    for depth in depths:
        ranked = {g: search._single_shapes(g, depth) for g in search.types}
        shapes = [x[0] for g in search.types for x in ranked[g][:singles]]
        shapes += search._mixed_shapes(depth, ranked)[:mixed]
        for shape in shapes:
            floors = [search._class_floor(shape, c) for c in range(len(shape.classes))]
            for layout in search._layouts(depth, shape):
                yield shape, layout, floors


def _scored(search, shape, layout, groups):
    """(the placement's draft, its score or None where it does not fit, its stage-0 ring)."""
    draft = search.scorer.draft(shape, groups)
    scored = search.scorer.finish(draft, layout)
    ring = search.scorer.first_ring(shape, groups) if scored is not None else None
    return draft, scored, ring


def _some_counts(max_d):
    """Pipelines per class: 1, 2, half and all of each class's most (at least 1 per class)."""
    picks = [sorted({v for v in (1, 2, d // 2, d) if 1 <= v <= d}) for d in max_d]
    return itertools.product(*picks)


def _placements(search, shape, layout, counts):
    out = set()
    for order in search.orders:
        zones = tuple(order[grp] for grp in layout)
        for stage_major in (False, True):
            groups = place(shape, zones, counts, search.free, stage_major=stage_major)
            if groups is not None:
                out.add(groups)
    return out


@pytest.mark.parametrize("objective", ["throughput", "cost"])
def test_skipping_placements_by_their_bound_changes_no_answer(
    sailor_planner, monkeypatch, objective
):
    """With every skip (``Search._loses``: a leaf's spanning ring, a placement's ring and
    draft bounds) and without: the search pops the same heap entries in the same order and
    gives the same plans, estimates and options, scoring fewer candidates with them."""
    job = Job.create("OPT-350M", 256, 2048, "fp32")
    inventory = Inventory.parse(SMALL_ZONES)
    popped = []

    class Recording:
        heappush = staticmethod(heapq.heappush)

        @staticmethod
        def heappop(heap):
            entry = heapq.heappop(heap)
            popped.append((entry[0], entry[7], entry[8]))
            return entry

    monkeypatch.setattr(branch_bound, "heapq", Recording)

    def answer():
        popped.clear()
        r = Planner(sailor_planner.sim).plan(job, inventory, SearchOptions(objective=objective))
        plans = [(p.plan.to_json(), p.estimate, p.options) for p in r.plans]
        return plans, list(popped), r.stats.candidates_evaluated

    with_skips = answer()
    monkeypatch.setattr(Search, "_loses", lambda self, thr, cost, hourly: False)
    without = answer()
    assert without[:2] == with_skips[:2]
    assert with_skips[2] < without[2], (with_skips[2], without[2])


@pytest.mark.parametrize(
    "options",
    [SearchOptions(pareto_points=6), SearchOptions(top_k=2, rescore=4)],
    ids=["pareto", "rescore"],
)
def test_reading_beyond_the_kept_best_turns_the_skips_off(sailor_planner, monkeypatch, options):
    """A Pareto frontier is drawn from every scored candidate, and a re-scoring of more than
    the kept best (top_k + 2) reads candidates beyond it: there the skips stay off, so the
    plans, the frontier and the count scored are those without them."""
    job = Job.create("OPT-350M", 256, 2048, "fp32")
    inventory = Inventory.parse(SMALL_ZONES)

    def answer():
        r = Planner(sailor_planner.sim).plan(job, inventory, options)
        plans = [(p.plan.to_json(), p.estimate) for p in r.plans]
        frontier = [(p.plan.to_json(), p.estimate) for p in r.pareto]
        return plans, frontier, r.stats.candidates_evaluated

    with_rules = answer()
    monkeypatch.setattr(Search, "_loses", lambda self, thr, cost, hourly: False)
    assert answer() == with_rules


def test_placements_that_may_start_the_local_search_are_scored(sailor_planner):
    """``_refine`` walks from the best candidate of each of the REFINE_STARTS best shapes: a
    placement that may beat the worst of them is scored even where the kept best beats it,
    so skipping placements leaves the local search's starts as they were."""
    job = Job.create("OPT-350M", 512, 2048, "fp32")
    cv = CostView(sailor_planner.sim, job)
    options = SearchOptions()
    search = Search(cv, Scorer(cv), Memo(), Inventory.parse(SMALL_ZONES), options)
    found = search.run()
    kept = found.threshold.throughput
    start = found.shape_threshold(REFINE_STARTS).throughput
    assert start < kept * (1 - 1e-6), (start, kept)  # the instance tells the two apart
    between = (start + kept) / 2
    assert not search._loses(between, 0.0, 0.0)
    assert search._loses(start * (1 - 1e-6), 0.0, 0.0)


def test_skip_bounds_hold_on_the_512_gpu_bench_inventory(sailor_planner, monkeypatch):
    """Every leaf the search pops on the bench's 512-GPU inventory, every placement of it:
    the skip bounds (``_leaf_loses``, ``_ring_loses``, ``_draft_loses``) are at least what it
    scores. Here a stage-major pipeline's p2p from us-central1-a to -b beats both zones' own
    (the Sailor fits), so a bound on the stage tables' same-zone costs (``_class_lb``) would
    not hold; the skip bounds count no p2p at all."""
    job = Job.create("OPT-350M", 1024, 2048, "fp32")
    inventory = Inventory.parse(
        [f"{g}@{z}=128" for g in ("A100-40", "V100-16") for z in CENTRAL[:2]]
    )
    checked = []
    original = Search._evaluate_placements

    def checking(self, shape, layout, counts, lbs):
        if lbs is not None:
            floors = [self._class_floor(shape, c) for c in range(len(shape.classes))]
            leaf = self.bnd.spanning_ring(shape, counts, layout[0])
            leaf = self.bnd.bounds(shape, floors, counts, ring=leaf)[0]
            for groups in _placements(self, shape, layout, counts):
                draft, scored, ring = _scored(self, shape, layout, groups)
                if scored is None:
                    continue
                ring = self.bnd.bounds(shape, floors, counts, ring=ring)[0]
                for bound in (leaf, ring, self.scorer.bound(draft)[0]):
                    assert scored.throughput <= bound * (1 + 1e-9), (shape, groups)
                checked.append(1)
        return original(self, shape, layout, counts, lbs)

    monkeypatch.setattr(Search, "_evaluate_placements", checking)
    for objective in ("throughput", "cost"):
        for top_k in (1, 5):  # more kept: more leaves popped (the cost bounds prune most)
            options = SearchOptions(objective=objective, top_k=top_k)
            Planner(sailor_planner.sim).plan(job, inventory, options)
    assert len(checked) >= 500, len(checked)


def test_a_class_bound_holds_for_every_zone_pattern_of_its_pipelines(sailor_planner):
    """``Search._class_base`` (the stage tables' costs with every neighbour's p2p lowered to
    the fastest of the type, ``_fastest_p2p``) is at most the B and B + F of a pipeline of the
    class in any zones. On the bench's 512-GPU inventory a pipeline whose stages alternate
    between us-central1-a and -b sends faster than either zone's own link (the Sailor fits):
    a bound on the fastest same-zone p2p alone was 0.06 % too optimistic there."""
    job = Job.create("OPT-350M", 1024, 2048, "fp32")
    inventory = Inventory.parse(
        [f"{g}@{z}=128" for g in ("A100-40", "V100-16") for z in CENTRAL[:2]]
    )
    cv = CostView(sailor_planner.sim, job)
    search = Search(cv, Scorer(cv), Memo(), inventory, SearchOptions())
    checked = crossing = 0
    for depth in (2, 3, 4):
        for g in search.types:
            for shape, *_ in search._single_shapes(g, depth)[:6]:
                b_lb, f_lb = search._class_base(shape, 0)[:2]
                for pattern in itertools.product(CENTRAL[:2], repeat=depth):
                    _times, _p2p, b, f, *_ = search.scorer.group_timing(shape, 0, pattern)
                    assert b_lb <= b * (1 + 1e-9), (shape, pattern, b_lb, b)
                    assert b_lb + f_lb <= (b + f) * (1 + 1e-9), (shape, pattern)
                    checked += 1
                    crossing += len(set(pattern)) > 1
    assert checked >= 100 and crossing >= 50, (checked, crossing)


def test_stage_tables_of_another_reference_zone_are_not_the_cached_ones(sailor_planner):
    """A Planner keeps one CostView per job across requests; two inventories whose reference
    zones differ (the Sailor fits: us-central1-a's and -b's A100 links differ) get the tables
    a fresh CostView builds for each, not the first zone's p2p."""
    from sailor_planner.search.templates import stage_tables

    job = Job.create("OPT-350M", 1024, 2048, "fp32")
    shared = CostView(sailor_planner.sim, job)
    for zone in CENTRAL[:2]:
        got = stage_tables(shared, "A100-40", 3, 4, 1, zone)
        want = stage_tables(CostView(sailor_planner.sim, job), "A100-40", 3, 4, 1, zone)
        for a, b in zip(got.cost, want.cost, strict=True):
            assert (a == b).all(), zone


@pytest.mark.parametrize("replicas", [2, 3, 5, 6, 7, 13])
def test_the_ring_bound_holds_for_rings_across_zones(sailor_planner, replicas):
    """``Bounder._fastest_ring`` is at most the sync of stage 0's ring however its replicas
    spread over the zones: in the Sailor fits a ring over us-central1-a and -b (edges a -> b
    and b -> a) beats both zones' own rings, which the one-zone bound alone missed. With more
    replicas than zones, two share a zone and the ring also has an edge inside it. Counts
    that are not two leading bits (5, 7, 13) are bounded by the ring of a rounded-down count
    (``bounds._two_bits``): rounding up would promise less than the ring takes."""
    job = Job.create("OPT-350M", 1024, 2048, "fp32")
    inventory = Inventory.parse(
        [f"{g}@{z}=128" for g in ("A100-40", "V100-16") for z in CENTRAL[:2]]
    )
    cv = CostView(sailor_planner.sim, job)
    search = Search(cv, Scorer(cv), Memo(), inventory, SearchOptions())
    checked = 0
    for depth in (1, 2):
        for g in search.types:
            for shape, *_ in search._single_shapes(g, depth)[:4]:
                kind = (g, shape.classes[0].tps[0])
                bound = search.bnd._fastest_ring(shape, ((kind, replicas),))
                for in_a in range(replicas + 1):
                    counts = (in_a, replicas - in_a)
                    runs = tuple(
                        ((z, *kind), n) for z, n in zip(CENTRAL[:2], counts, strict=True) if n
                    )
                    sync = search.scorer.sync(shape, 0, runs, 1, kind).seconds
                    assert bound <= sync * (1 + 1e-9), (shape, runs, bound, sync)
                    checked += 1
    assert checked >= 20, checked


@pytest.mark.parametrize("options", [ExecutionOptions(), ExecutionOptions(virtual_stages=2)])
def test_cost_bounds_of_ranges_and_nodes_hold_for_every_scored_candidate(sailor_planner, options):
    """The $/iteration bounds the cost objective prunes by: a node's key under a throughput
    floor (``Bounder.node_key``: from the fewest pipelines that may reach it on) and a range
    lo..hi of pipelines (``Bounder.bounds`` with ``fewest``, term by term) are at most the
    cost of every scored candidate in them, at the inventory's own prices (us-central1's
    A100-40 costs 34 % more than the catalog's cheapest region, which the bounds used to
    take). With interleaving F may be negative (the bill of the most pipelines bounds it)."""
    job = dataclasses.replace(Job.create("OPT-350M", 256, 2048, "fp32"), options=options)
    inventory = Inventory.parse(
        [f"A100-40@{z}=16" for z in CENTRAL[:2]] + ["V100-16@us-central1-a=8"]
    )
    cv = CostView(sailor_planner.sim, job)
    constraints = Constraints(min_throughput=0.05)
    search_options = SearchOptions(objective="cost", constraints=constraints)
    search = Search(cv, Scorer(cv), Memo(), inventory, search_options)
    checked = ranges = nodes_pruned = 0
    for shape, layout, _floors in _shape_layouts(search, (1, 2, 4), singles=3, mixed=0):
        max_d = search._max_pipelines(shape, layout)
        lbs = [search._class_lb(shape, 0, layout)]
        key = search.bnd.node_key(shape, lbs, max_d)
        scored = {}
        for d in range(1, max_d[0] + 1):
            for groups in _placements(search, shape, layout, (d,)):
                s = search.scorer.score(shape, groups, layout)
                if s is not None:
                    scored.setdefault(d, []).append(s)
        meeting = [s for ss in scored.values() for s in ss if constraints.admits(
            s.throughput, s.cost_per_iteration, s.cost_per_hour)]  # fmt: skip
        if key is None:
            assert not meeting, shape
            nodes_pruned += 1
        for s in meeting:
            assert s.cost_per_iteration >= key * (1 - 1e-9), (shape, s.groups)
            checked += 1
        for lo, hi in itertools.combinations(sorted(scored), 2):
            cost = search.bnd.bounds(shape, lbs, [hi], fewest=[lo])[1]
            for d in range(lo, hi + 1):
                for s in scored.get(d, []):
                    assert s.cost_per_iteration >= cost * (1 - 1e-9), (shape, lo, hi, d)
            ranges += 1
    assert checked >= 50 and ranges >= 150 and nodes_pruned >= 1, (checked, ranges, nodes_pruned)
