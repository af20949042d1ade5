"""The planner's memory verdict is the simulator's: on a grid of candidates (GH-96, V100-16,
A100-40; 1-3 stages; head stages near their limit) ``Scorer.fits`` equals
``Simulator.estimate(...).fits``, and the search tables never drop a range that fits."""

import itertools
from pathlib import Path

import pytest

from sailor_planner.planner import Planner
from sailor_planner.request import SearchOptions
from sailor_planner.search.allocate import Group, Scored, build_plan
from sailor_planner.search.balance import ClassLoad
from sailor_planner.search.branch_bound import Search
from sailor_planner.search.partition import even_bounds
from sailor_planner.search.templates import ClassShape, Shape
from sailor_sim import Inventory, Job, StageSlice

ZONE = "us-central1-a"


def _candidates(job: Job, gpus: tuple[str, ...]):
    n = job.model.num_layer_ids
    for g, p, mbs, tp, d in itertools.product(gpus, (1, 2, 3), (1, 4, 8), (1, 2), (1, 2, 4)):
        gbs = job.global_batch_size
        if gbs % mbs or gbs // mbs < d:
            continue
        base, extra = divmod(gbs // mbs, d)
        shape = Shape(even_bounds(n, p), (ClassShape(g, mbs, (tp,) * p),))
        groups = (Group(0, (ZONE,) * p, d),)
        yield shape, groups, (ClassLoad(base, extra),)


@pytest.mark.parametrize(
    "model,gbs,gpus,options",
    [
        ("OPT-350M", 64, ("GH-96", "V100-16", "A100-40"), None),
        ("GPT-Neo-2.7B", 32, ("GH-96", "A100-40", "V100-16"), None),
        # execution options move both the verdict and the search's tables
        ("GPT-Neo-2.7B", 32, ("GH-96", "A100-40", "V100-16"), {"zero": "zero1"}),
        ("GPT-Neo-2.7B", 64, ("GH-96", "A100-40"), {"recompute": "full", "zero": "zero2"}),
        ("GPT-Neo-2.7B", 64, ("GH-96", "A100-40"), {"recompute": "selective"}),
    ],
)
def test_scorer_memory_verdict_equals_estimate_fits(sim, model, gbs, gpus, options) -> None:
    job = Job.create(model, gbs, 2048, options=options)
    cv, scorer, _ = Planner(sim)._state(job)
    verdicts, head_only = [], 0
    for shape, groups, loads in _candidates(job, gpus):
        plan = build_plan(Scored(shape, groups, loads, 1.0, 0.0, 0.0, 0))
        est = sim.estimate(job, plan)
        mine = scorer.fits(shape, groups, loads)
        assert mine == est.fits, (shape, loads)
        verdicts.append(mine)
        failing = {m.stage for m in est.memory if not m.fits}
        head_only += failing == {plan.num_stages - 1}
        # The search tables: "sure" implies fits; fits implies "may fit" (never pruned).
        p, mm = shape.depth, gbs // shape.classes[0].mbs
        cls = shape.classes[0]
        for i, (a, b) in enumerate(shape.bounds):
            args = (cls.gpu, cls.mbs, cls.tps[i], min(p - i, mm), (i > 0) + (i < p - 1))
            cap = cv.capacity(cls.gpu)
            ok = all(m.fits for m in est.memory if m.stage == i)
            if cv.fit_matrix(*args, cap, True)[a, b]:
                assert ok
            if ok:
                assert cv.fit_matrix(*args, cap, False)[a, b]
    # The grid must exercise both verdicts, and plans where only the head stage is too big.
    assert any(verdicts) and not all(verdicts)
    assert head_only > 0


def test_search_scores_equal_estimates_on_gh96_across_zones(sim) -> None:
    """GH-96 rings use their own bus efficiency: scores still equal ``estimate``."""
    job = Job.create("OPT-350M", 512, 2048)
    inventory = Inventory.parse(["GH-96@us-central1-a=16", "GH-96@us-central1-b=16"])
    cv, scorer, memo = Planner(sim)._state(job)
    search = Search(cv, scorer, memo, inventory, SearchOptions(top_k=5))
    search.tight = False  # every placement the leaves reach is scored: more to compare
    found = search.run()
    assert any(s.gpus > 16 for s in found.scored)  # data parallelism across both zones
    for s in found.scored[:40]:
        e = sim.estimate(job, build_plan(s))
        assert e.fits
        assert e.iteration_time_s == pytest.approx(s.iteration_s, rel=1e-12)
        assert e.cost_per_iteration_usd == pytest.approx(s.cost_per_iteration, rel=1e-12)


def test_profiled_oom_configurations_are_skipped() -> None:
    """A (GPU, mbs, TP) the profiler marked 'oom' is refused by the simulator; the planner
    plans around it instead of failing."""
    from sailor_sim import ProfileStore, Simulator
    from sailor_sim.profiles.store import ProfileEntry, ProfileKey

    job = Job.create("OPT-350M", 256, 2048)
    inventory = Inventory.parse(["A100-40@us-central1-a=16"])
    free = Planner(Simulator()).plan(job, inventory, SearchOptions(top_k=1)).best.plan
    r = free.stages[0].replicas[0]
    key = ProfileKey("OPT-350M", "A100-40", "fp32", r.microbatch_size, r.tp)
    store = ProfileStore([ProfileEntry(key, 2048, (), "measured", status="oom", note="OOM")])
    result = Planner(Simulator(store)).plan(job, inventory, SearchOptions(top_k=3))
    used = {
        (x.microbatch_size, x.tp) for p in result.plans for s in p.plan.stages for x in s.replicas
    }
    assert result.plans and (r.microbatch_size, r.tp) not in used


@pytest.mark.parametrize("zero", ["none", "zero2", "zero3", "hybrid"])
def test_tables_hold_the_simulators_gathered_weights(sim, zero) -> None:
    """The bytes the search tables add to every range whatever the sharding (transient, and
    the parameters ZeRO-2/3 gather from their shards) are the simulator's terms, range by
    range: ZeRO-2 all of a..b's weights, ZeRO-3 twice its largest layer."""
    job = Job.create("OPT-350M", 64, 2048, options={"zero": zero})
    for terms in _check_gathered_terms(sim, job, "A100-40", 2, 2, dp=2):
        if zero == "zero2":
            assert terms["gathered_weights"] == terms["weights"] * 2  # 2 shards


def _check_gathered_terms(sim, job: Job, g: str, mbs: int, tp: int, dp: int):
    """Assert, range by range, that the tables' position-independent bytes are the
    simulator's transient plus gathered weights; yields each range's simulator terms."""
    cv, _, _ = Planner(sim)._state(job)
    extra = cv._parts(g, mbs, tp)[2]
    for a in range(cv.n):
        for b in range(a, cv.n):
            terms = sim.replica_memory(job, StageSlice(a, b, g, tp, mbs), 0, 1, 1, dp)
            assert extra[a, b] == terms["transient"] + terms.get("gathered_weights", 0), (a, b)
            yield terms


MIXTRAL = str(Path(__file__).parents[3] / "examples" / "configs" / "mixtral-8x7b" / "config.json")


@pytest.mark.parametrize("zero", ["zero3", "hybrid"])
def test_tables_gather_only_the_expert_groups_experts(sim, zero) -> None:
    """Under expert parallelism a ZeRO-3 layer gathers its expert group's experts, not the
    whole layer (``held_layer_params``): the tables' gathered bytes are the simulator's, range
    by range. They counted every expert, ep times the routed experts a rank gathers, and
    ruled out ranges the simulator fits."""
    job = Job.create(MIXTRAL, 64, 4096, "bf16", options={"zero": zero, "expert_parallel": 8})
    for terms in _check_gathered_terms(sim, job, "H100-80", 1, 2, dp=8):
        assert terms["gathered_weights"] > 0


@pytest.mark.parametrize("v", [2, 4])
def test_interleaved_sure_verdicts_hold_on_every_stage(sim, v) -> None:
    """Interleaved 1F1B holds Megatron's warm-up chunks, 2 (p - i - 1) + (v - 1) p + 1, so a
    late stage holds more than 1F1B's p - i microbatches (the last one p - (p - 1) / v
    stage activations, not one): a "surely fits" range fits at every stage, as the simulator
    counts it, with the most microbatches the job can have; and the grid has stages where
    the place matters (the verdict at p - i alone would have been wrong)."""
    job = Job.create("GPT-Neo-2.7B", 64, 2048, options={"virtual_stages": v})
    cv, _, _ = Planner(sim)._state(job)
    plain, _, _ = Planner(sim)._state(Job.create("GPT-Neo-2.7B", 64, 2048))  # 1F1B
    n, checked, placed = job.model.num_layer_ids, 0, 0
    for g, p, mbs, tp in itertools.product(("GH-96", "A100-40"), (2, 4), (1, 2, 4), (1, 2)):
        mm = job.global_batch_size // mbs
        for i, (a, b) in enumerate(even_bounds(n, p)):
            neighbours = (i > 0) + (i < p - 1)
            args = (g, mbs, tp, min(p - i, mm), neighbours, cv.capacity(g), True)
            sure = cv.fit_matrix(*args, stage=(i, p, mm))[a, b]
            peak, cap = sim.replica_peak(job, StageSlice(a, b, g, tp, mbs), i, p, mm, 2)
            checked += 1
            if sure:
                assert peak <= cap, (g, p, mbs, tp, i)
            placed += sure != plain.fit_matrix(*args)[a, b]
    assert checked and placed > 0
