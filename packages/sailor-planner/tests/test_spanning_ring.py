"""The spanning-ring bound (``Bounder.spanning_ring``, issue 22): where stage 0's replicas
cannot fit in one zone, a leaf's bound counts the ring's slowest edge between zones. It must
never promise less than a scored candidate reaches (the Sailor fits' edges between zones are
asymmetric: every edge into us-central1-a is fast), it must prune, and it must change no
answer."""

import itertools

import pytest

from sailor_planner.planner import Planner
from sailor_planner.request import SearchOptions
from sailor_planner.search.allocate import Scorer
from sailor_planner.search.bounds import Bounder
from sailor_planner.search.branch_bound import Memo, Search
from sailor_planner.search.costs import CostView
from sailor_sim import Inventory, Job

CENTRAL = ("us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f")
SMALL_ZONES = [f"{g}@{z}={n}" for g, n in (("A100-40", 8), ("GH-96", 4)) for z in CENTRAL]
"""Two types in the four zones of one region, few GPUs per zone: rings span zones early."""


@pytest.mark.parametrize("source", ["sim", "sailor_planner"])
def test_leaf_bounds_with_the_spanning_ring_hold_for_every_scored_candidate(request, source):
    sim = request.getfixturevalue(source)
    sim = getattr(sim, "sim", sim)  # the planner fixture holds its simulator
    job = Job.create("OPT-350M", 64, 2048, "fp32")
    cv = CostView(sim, job)
    options = SearchOptions(microbatch_sizes=(1, 2))
    search = Search(cv, Scorer(cv), Memo(), Inventory.parse(SMALL_ZONES), options)
    checked, tighter = 0, 0
    for depth in (1, 2, 3):
        singles = {g: search._single_shapes(g, depth) for g in search.types}
        shapes = [x[0] for g in search.types for x in singles[g][:4]]
        shapes += search._mixed_shapes(depth, singles)[:6]
        for shape in shapes:
            for layout in search._layouts(depth, shape):
                max_d = search._max_pipelines(shape, layout)
                lbs = [search._class_lb(shape, c, layout) for c in range(len(shape.classes))]
                lo = 1 if len(max_d) > 1 else 0
                for counts in itertools.product(*(range(lo, d + 1) for d in max_d)):
                    if not any(counts):
                        continue
                    scored = search._evaluate(shape, layout, counts)
                    if scored is None:
                        continue
                    thr, cost, _ = search.bnd.bounds(shape, lbs, counts, stage0_zones=layout[0])
                    assert scored.throughput <= thr * (1 + 1e-9), (shape, layout, counts)
                    assert scored.cost_per_iteration >= cost * (1 - 1e-9), (shape, layout, counts)
                    checked += 1
                    tighter += search.bnd.bounds(shape, lbs, counts)[0] > thr
    assert checked >= 200 and tighter >= 20, (checked, tighter)


def test_the_spanning_ring_prunes_and_changes_no_answer(sailor_planner, monkeypatch):
    """With the bound and without it (0 s for every ring): the same plans and estimates for
    both objectives, and fewer candidates scored with it."""
    job = Job.create("OPT-350M", 256, 2048, "fp32")
    inventory = Inventory.parse(SMALL_ZONES)

    def answers():
        out, scored = [], 0
        for objective in ("throughput", "cost"):
            r = Planner(sailor_planner.sim).plan(job, inventory, SearchOptions(objective=objective))
            out.append([(p.plan.to_json(), p.estimate, p.options) for p in r.plans])
            scored += r.stats.candidates_evaluated
        return out, scored

    with_bound, fewer = answers()
    monkeypatch.setattr(Bounder, "spanning_ring", lambda self, shape, counts, zones: 0.0)
    without, more = answers()
    assert without == with_bound
    assert fewer < more, (fewer, more)
