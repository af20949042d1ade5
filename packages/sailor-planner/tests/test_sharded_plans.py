"""ZeRO-2/3 and hybrid sharding run collectives every microbatch, so a stage's replicas need
one TP degree and one microbatch count (``sailor_sim``'s ``features.sharding``). The planner
returned balanced plans of mixed GPU types under them (3 microbatches on the A100s, 1 on the
V100s), which no framework runs and the engine refused."""

import dataclasses

import pytest

from sailor_planner.planner import Planner
from sailor_planner.request import SearchOptions
from sailor_planner.search.exhaustive import exhaustive_best
from sailor_sim import ExecutionOptions, Inventory, Job, sharding_problem

MIXED = ["A100-40@us-central1-a=2", "V100-16@us-central1-b=2"]


@pytest.mark.parametrize("zero", ["zero2", "zero3", "hybrid"])
def test_sharded_plans_are_optimal_among_those_that_run(sim, zero) -> None:
    """With the job's options fixed, the planner's best equals an enumeration of every plan
    (the simulator refuses the ones sharding cannot run) and runs under the rule."""
    job = Job.create("OPT-350M", 16, 1024, options=ExecutionOptions(zero=zero))
    inventory = Inventory.parse(MIXED)
    options = SearchOptions(microbatch_sizes=(1, 2, 4), search_execution_options=False)
    best, scored = exhaustive_best(sim, job, inventory, options)
    assert scored > 100 and best is not None
    assert sharding_problem(zero, best.plan) is None
    got = Planner(sim).plan(job, inventory, options).best
    assert sharding_problem(zero, got.plan) is None, got.plan
    assert got.estimate.throughput_iters_per_s == pytest.approx(
        best.estimate.throughput_iters_per_s, rel=1e-9
    )


@pytest.mark.parametrize(
    "zero,pools",
    [
        ("zero2", MIXED),  # TP 1 on the A100s and TP 2 on the V100s
        ("zero2", ["A100-40@us-central1-a=12"]),  # 10 and 11 microbatches
        ("zero3", ["A100-40@us-central1-a=12"]),  # 2 and 3 microbatches
        ("zero3", ["A100-80@us-central1-a=24"]),
    ],
)
def test_fixed_sharded_options_plan_only_what_runs(sim, zero, pools) -> None:
    """Each of the best plans under the job's ZeRO stage runs under the rule; before, every
    one of these returned only plans that break it."""
    job = Job.create("OPT-350M", 256, 1024, options=ExecutionOptions(zero=zero))
    options = SearchOptions(top_k=3, search_execution_options=False)
    result = Planner(sim).plan(job, Inventory.parse(pools), options)
    assert result.plans
    for ranked in result.plans:
        assert sharding_problem(zero, ranked.plan) is None, ranked.plan
        assert ranked.estimate.fits


@pytest.mark.parametrize(
    "pools",
    [
        MIXED,
        ["A100-40@us-central1-a=16", "V100-16@us-central1-a=16", "V100-16@us-central1-b=8"],
        ["A100-40@us-central1-a=12"],
    ],
)
def test_the_option_search_names_sharding_only_where_it_runs(sim, pools) -> None:
    """Every ranked plan and Pareto point whose options shard gradients or parameters has one
    TP degree and one microbatch count per stage, and its estimate is the simulator's."""
    gbs = 16 if pools is MIXED else 256
    job = Job.create("OPT-350M", gbs, 1024 if pools is MIXED else 2048)
    search = SearchOptions(top_k=5, pareto_points=6)
    result = Planner(sim).plan(job, Inventory.parse(pools), search)
    assert result.plans
    for ranked in (*result.plans, *result.pareto):
        options = ranked.options or job.options
        assert sharding_problem(options.zero, ranked.plan) is None, (options, ranked.plan)
        chosen = dataclasses.replace(job, options=options)
        assert ranked.estimate.to_dict() == sim.estimate(chosen, ranked.plan).to_dict()
