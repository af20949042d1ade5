"""Many GPU types in many zones of several regions (issue 22: 4 types x 8 zones did not finish
in 300 s): the search returns the simulator's plan, and its bounds, in one region or across a
region boundary, never promise less than a scored candidate reaches (the Sailor fits' same-zone
links cross: the tables' reference zone is not the fastest at every size)."""

import dataclasses

import pytest

from sailor_planner.planner import Planner
from sailor_planner.request import SearchOptions
from sailor_planner.search.allocate import Scorer
from sailor_planner.search.bounds import Bounder
from sailor_planner.search.branch_bound import LOOSE_SHAPE, SHAPE, SHAPE_MARGIN, Memo, Search
from sailor_planner.search.costs import CostView
from sailor_sim import Inventory, Job

ZONES_8 = (
    "us-central1-a",
    "us-central1-b",
    "us-central1-c",
    "us-central1-f",
    "us-east1-b",
    "us-east1-c",
    "us-west1-a",
    "us-west1-b",
)
TYPES_4 = ("A100-40", "V100-16", "A100-80", "GH-96")


def test_four_types_in_eight_zones_of_three_regions_return_a_plan(sailor_planner) -> None:
    # The bench's 4096-GPU case scaled down to 2 GPUs per pool, same shape: 32 pools.
    job = Job.create("OPT-350M", 64, 2048, "fp32")
    inventory = Inventory.parse([f"{g}@{z}=2" for g in TYPES_4 for z in ZONES_8])
    result = Planner(sailor_planner.sim).plan(job, inventory, SearchOptions())
    assert not result.partial
    best = result.best
    for (g, z), n in best.plan.gpu_counts().items():
        assert n <= inventory.count(g, z), f"{n}x {g}@{z} is more than the inventory holds"
    scored_job = dataclasses.replace(job, options=best.options or job.options)
    again = sailor_planner.sim.estimate(scored_job, best.plan)
    assert again.throughput_iters_per_s == pytest.approx(
        best.estimate.throughput_iters_per_s, rel=1e-9
    )


@pytest.mark.parametrize("source", ["sim", "sailor_planner"])
def test_layout_bounds_hold_for_every_scored_candidate(request, source) -> None:
    sim = request.getfixturevalue(source)
    sim = getattr(sim, "sim", sim)  # the planner fixture holds its simulator
    job = Job.create("OPT-350M", 32, 2048, "fp32")
    inventory = Inventory.parse(
        [f"A100-40@{z}=8" for z in ("us-central1-a", "us-central1-b", "us-west1-b")]
    )
    cv = CostView(sim, job)
    search = Search(cv, Scorer(cv), Memo(), inventory, SearchOptions(microbatch_sizes=(1, 2)))
    checked, crossing = 0, 0
    for depth in (2, 3, 4):
        for shape, *_ in search._single_shapes("A100-40", depth)[:6]:
            for layout in search._layouts(depth, shape):
                max_d = search._max_pipelines(shape, layout)
                lbs = [search._class_lb(shape, c, layout) for c in range(len(shape.classes))]
                for d in range(1, max_d[0] + 1):
                    scored = search._evaluate(shape, layout, (d,))
                    if scored is None:
                        continue
                    thr, cost, _ = search.bnd.bounds(shape, lbs, (d,))
                    assert scored.throughput <= thr * (1 + 1e-9), (shape, layout, d)
                    assert scored.cost_per_iteration >= cost * (1 - 1e-9), (shape, layout, d)
                    checked += 1
                    crossing += layout[0] != layout[-1]
    assert crossing >= 10  # cross-region candidates were really scored


TWO_TYPES_FOUR_ZONES = [
    f"{g}@{z}={n}"
    for g, n in (("A100-40", 8), ("V100-16", 4))
    for z in ("us-central1-a", "us-central1-b", "us-west1-b", "us-east1-b")
]


@pytest.mark.parametrize("source", ["sim", "sailor_planner"])
def test_shape_bound_is_above_every_layouts_node_key(request, source) -> None:
    """``Search._shape_bound`` (one bound for all layouts of a shape, which lets a search with
    an incumbent skip the shape) is at least every layout's own node key, for one-type and
    mixed shapes, in one region and across a region boundary: a bound below a node key
    would skip plans the search has to score."""
    sim = request.getfixturevalue(source)
    sim = getattr(sim, "sim", sim)
    job = Job.create("OPT-350M", 64, 2048, "fp32")
    inventory = Inventory.parse(TWO_TYPES_FOUR_ZONES)
    cv = CostView(sim, job)
    search = Search(cv, Scorer(cv), Memo(), inventory, SearchOptions(microbatch_sizes=(1, 2, 4)))
    checked, mixed, crossing = 0, 0, 0
    for depth in (1, 2, 3, 4):
        singles = {g: search._single_shapes(g, depth) for g in search.types}
        shapes = [x[0] for g in search.types for x in singles[g]]
        shapes += search._mixed_shapes(depth, singles)
        for shape in shapes:
            layouts = search._layouts(depth, shape)
            bound = search._shape_bound(shape, layouts)
            if bound is None:
                continue
            for layout in layouts:
                max_d = search._max_pipelines(shape, layout)
                if not any(max_d) or (len(max_d) > 1 and not all(max_d)):
                    continue
                lbs = [search._class_lb(shape, c, layout) for c in range(len(shape.classes))]
                key = search.bnd.node_key(shape, lbs, max_d)
                assert key is not None
                assert -key <= bound * (1 + 1e-12), (shape, layout, -key, bound)
                checked += 1
                mixed += len(shape.classes) > 1
                crossing += layout[0] != layout[-1]
    assert checked >= 100 and mixed >= 20 and crossing >= 20, (checked, mixed, crossing)


def test_skipping_shapes_the_incumbent_beats_changes_no_answer(sailor_planner, monkeypatch):
    """With the shape bound (option search: the lean searches start from an incumbent; a
    re-plan from the previous plan) and without it: the same plans, estimates, options and
    candidates scored; and it did skip shapes. ``_shape_beaten`` tries the bound without the
    sync first (to save the sync's ring bound where that already loses): its verdict is still
    the full bound's, shape by shape."""
    job = Job.create("OPT-350M", 256, 2048, "fp32")
    inventory = Inventory.parse(TWO_TYPES_FOUR_ZONES)
    fewer = Inventory.parse(TWO_TYPES_FOUR_ZONES[:-1])
    skipped = []
    original = Search._shape_beaten

    def counting(self, shape, layouts):
        beaten = original(self, shape, layouts)
        full = self._shape_bound(shape, layouts)
        floor = self.incumbent[0] * (1 - 1e-9)
        assert beaten == (full is not None and full * (1 + SHAPE_MARGIN) < floor), shape
        skipped.append(beaten)
        return beaten

    def answers():
        planner = Planner(sailor_planner.sim)
        out = []
        for objective in ("throughput", "cost"):
            options = SearchOptions(objective=objective, pareto_points=3)  # top_k 1
            first = planner.plan(job, inventory, options)
            again = planner.plan(job, fewer, options, previous=first.best.plan)
            for r in (first, again):
                out.append(
                    (
                        [(p.plan.to_json(), p.estimate, p.options) for p in r.plans],
                        [(p.plan.to_json(), p.estimate) for p in r.pareto],
                        r.stats.candidates_evaluated,
                    )
                )
        return out

    monkeypatch.setattr(Search, "_shape_beaten", counting)
    with_bound = answers()
    assert any(skipped) and not all(skipped)
    monkeypatch.setattr(Search, "_shape_beaten", lambda self, shape, layouts: False)
    assert answers() == with_bound


@pytest.mark.parametrize("objective", ["throughput", "cost"])
def test_a_shapes_heap_key_is_no_worse_than_any_of_its_layout_nodes(
    sailor_planner, monkeypatch, objective
):
    """``Search._shape_key`` stands for every layout node of its shape until it is popped: it
    must be at least as good (lower) as each node's ``Bounder.node_key``, or the search could
    end before reaching a node that beats the best candidate; so must the full key a loose
    entry goes back under (``_full_shape_key``). Fails if a bound is unsound."""
    job = Job.create("OPT-350M", 256, 2048, "fp32")
    inventory = Inventory.parse(TWO_TYPES_FOUR_ZONES)
    checked = []
    original_push, original_key = Search._push_nodes, Bounder.node_key
    current = []

    def pushing(self, heap, tick, shape, layouts):
        key, kind = self._shape_key(shape, layouts)
        if key is not None and kind is LOOSE_SHAPE:
            full = self._full_shape_key(shape, layouts)
            assert key <= full, (shape, key, full)
            key = full  # the tighter of the two
        current.append(key)
        try:
            original_push(self, heap, tick, shape, layouts)
        finally:
            current.pop()

    def node_key(self, shape, lbs, max_d):
        key = original_key(self, shape, lbs, max_d)
        if current and current[-1] is not None and key is not None:
            assert current[-1] <= key, (shape, current[-1], key)
            checked.append(key)
        return key

    monkeypatch.setattr(Search, "_push_nodes", pushing)
    monkeypatch.setattr(Bounder, "node_key", node_key)
    Planner(sailor_planner.sim).plan(job, inventory, SearchOptions(objective=objective))
    assert checked  # some shapes did stand for their layouts


@pytest.mark.parametrize("objective", ["throughput", "cost"])
def test_building_layout_nodes_when_their_shape_is_popped_changes_no_answer(
    sailor_planner, monkeypatch, objective
):
    """Layout nodes built lazily (a shape's entry keyed by ``_shape_key``, a loose key
    tightened at the top of the heap), all at once, and lazily under full keys from the
    start: the same plans, estimates and options."""
    job = Job.create("OPT-350M", 256, 2048, "fp32")
    inventory = Inventory.parse(TWO_TYPES_FOUR_ZONES)

    def answer():
        r = Planner(sailor_planner.sim).plan(job, inventory, SearchOptions(objective=objective))
        return [(p.plan.to_json(), p.estimate, p.options) for p in r.plans]

    lazy = answer()
    shape_key = Search._shape_key

    def full_keys(self, shape, layouts):
        key, kind = shape_key(self, shape, layouts)
        if kind is LOOSE_SHAPE and key is not None:
            return self._full_shape_key(shape, layouts), SHAPE
        return key, kind

    monkeypatch.setattr(Search, "_shape_key", full_keys)
    assert answer() == lazy
    monkeypatch.setattr(Search, "_shape_key", lambda self, shape, layouts: (None, SHAPE))
    assert answer() == lazy
