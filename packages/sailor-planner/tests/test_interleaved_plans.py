"""Under interleaved 1F1B the planner proposes only plans Megatron's interleaved schedule runs
(``sailor_sim.spec.interleave``: >= 2 stages, every pipeline's microbatch count a multiple of
the stage count, a layer in every chunk), and stays optimal against exhaustive enumeration.

The planner keeps the job's virtual_stages (an option it never varies, ``execution.py``): it
does not fall back to plain 1F1B, and an interleaved job skips the lean ZeRO-3 search (one-stage
plans, which cannot interleave)."""

from __future__ import annotations

import pytest

from sailor_planner.errors import NoFeasiblePlanError
from sailor_planner.planner import Planner
from sailor_planner.request import Constraints, SearchOptions
from sailor_planner.search.allocate import build_plan
from sailor_planner.search.balance import balance
from sailor_planner.search.branch_bound import Search
from sailor_planner.search.exhaustive import exhaustive_best
from sailor_sim import ExecutionOptions, Inventory, Job, Simulator, interleave_problem

CASES = [
    # (model, global batch, sequence, pools): old planners answered the last two with odd
    # microbatch counts on 2 stages (15 per pipeline; 1 per pipeline)
    ("OPT-350M", 24, 1024, ["A100-40@us-central1-a=3", "V100-16@us-central1-a=4"]),
    ("OPT-350M", 12, 1024, ["A100-40@us-central1-a=6"]),
    ("GPT-Neo-2.7B", 30, 2048, ["A100-40@us-central1-a=8", "V100-16@us-central1-b=8"]),
    ("tiny-gpt", 8, 64, ["A100-40@us-central1-a=8"]),
]


@pytest.fixture()
def sim() -> Simulator:
    """A simulator of the test's own: the exhaustive enumerations fill its caches, which the
    session's shared one would keep (and every later test would carry)."""
    return Simulator()


def _job(model, gbs, seq, v) -> Job:
    return Job.create(model, gbs, seq, options=ExecutionOptions(virtual_stages=v))


def _problem(job: Job, ranked) -> str | None:
    v = (ranked.options or job.options).virtual_stages
    return interleave_problem(ranked.plan, job.model.head_layer_id, v)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-gbs{c[1]}")
@pytest.mark.parametrize("v", [2, 3])
def test_planner_never_returns_a_plan_interleaving_cannot_run(sim, case, v):
    model, gbs, seq, pools = case
    job = _job(model, gbs, seq, v)
    result = Planner(sim).plan(job, Inventory.parse(pools), SearchOptions(top_k=3))
    assert result.plans
    for ranked in (*result.plans, *result.pareto):
        assert _problem(job, ranked) is None, ranked.plan.describe()
        assert (ranked.options or job.options).virtual_stages == v  # no fallback to 1F1B


@pytest.mark.parametrize("case", CASES[1:3], ids=lambda c: f"{c[0]}-gbs{c[1]}")
def test_every_candidate_the_search_scores_runs_interleaved(sim, case):
    """The rule is in the search (balanced microbatch counts, masked layer ranges), not only
    in the re-scoring: every candidate it scored builds a plan the rule admits (and the
    simulator prices)."""
    model, gbs, seq, pools = case
    job = _job(model, gbs, seq, 2)
    cv, scorer, memo = Planner(sim)._state(job)
    found = Search(cv, scorer, memo, Inventory.parse(pools), SearchOptions(top_k=5)).run()
    assert found.scored
    for s in found.scored:
        plan = build_plan(s)
        assert interleave_problem(plan, job.model.head_layer_id, 2) is None, plan.describe()
        sim.estimate(job, plan)  # refused (PlanError) if the rule were broken


def test_microbatch_balance_in_steps_of_the_stage_count():
    for step in (2, 3, 4):
        for gbs, pipes, mbs in ((24, [2, 1], [1, 2]), (48, [3, 2], [2, 1]), (36, [5], [1])):
            loads = balance(gbs, pipes, mbs, [1.0, 1.3][: len(pipes)], [2.0, 1.0][: len(pipes)],
                            step)  # fmt: skip
            if loads is None:
                continue
            samples = 0
            for load, d, m in zip(loads, pipes, mbs, strict=True):
                counts = load.counts(d)
                assert all(c > 0 and c % step == 0 for c in counts)
                assert load.total(d) == sum(counts) and load.top == max(counts)
                samples += m * sum(counts)
            assert samples == gbs
    assert balance(10, [1], [1], [1.0], [1.0], 4) is None  # 10 microbatches: not 4 k


@pytest.mark.parametrize(
    "pools",
    [
        ["A100-40@us-central1-a=2", "V100-16@us-central1-b=2"],
        ["V100-16@us-central1-a=3"],
        ["A100-40@us-central1-a=4"],
    ],
)
@pytest.mark.parametrize("objective", ["throughput", "cost"])
def test_optimal_against_exhaustive_enumeration_with_interleaving(sim, pools, objective):
    """The exhaustive space holds every microbatch split; the simulator refuses those the
    rule rules out, so this checks the search's restricted balance and ranges lose nothing."""
    job = _job("OPT-350M", 16, 1024, 2)
    inventory = Inventory.parse(pools)
    options = SearchOptions(
        objective=objective,
        constraints=Constraints(),
        microbatch_sizes=(1, 2, 4),
        search_execution_options=False,
    )
    best, scored = exhaustive_best(sim, job, inventory, options)
    assert scored > 100 and best is not None
    got = Planner(sim).plan(job, inventory, options).best
    key = (
        (lambda e: e.throughput_iters_per_s)
        if objective == "throughput"
        else (lambda e: e.cost_per_iteration_usd)
    )
    assert key(got.estimate) == pytest.approx(key(best.estimate), rel=1e-9)
    assert _problem(job, got) is None


def test_no_interleavable_plan_says_so(sim):
    """tiny-gpt (6 blocks) cannot cut any 2 stages into 4 chunks with a layer in every one:
    the job is refused, naming the most it can take. With 3 it can, but not on one GPU: the
    error names virtual_stages instead of blaming memory alone."""
    with pytest.raises(ValueError, match=r"options\.virtual_stages: .*at most 3"):
        _job("tiny-gpt", 8, 64, 4)
    with pytest.raises(NoFeasiblePlanError, match="virtual_stages=3"):
        Planner(sim).plan(_job("tiny-gpt", 8, 64, 3), Inventory.parse(["A100-40@us-central1-a=1"]))


def test_cli_keeps_the_jobs_virtual_stages(tmp_path):
    """The option search never drops the job's virtual stages (README): OPT-350M on 8 A100s
    with 4 virtual stages once ranked one-stage ZeRO-3 plans with virtual_stages=1 first."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = str(Path(sys.executable).parent / "sailor-planner")
    args = ["plan", "--model", "OPT-350M", "--gbs", "64", "--seq-len", "2048", "--gpus",
            "A100-40@us-central1-a=8", "--virtual-stages", "4", "--top", "3", "--pareto", "4",
            "--json"]  # fmt: skip
    out = subprocess.run([script, *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    for ranked in data["plans"] + data["pareto"]:
        assert ranked["options"]["virtual_stages"] == 4
        assert len(ranked["plan"]["stages"]) >= 2


@pytest.mark.parametrize(
    "options",
    [
        ExecutionOptions(virtual_stages=2),
        ExecutionOptions(virtual_stages=3),
        ExecutionOptions(virtual_stages=2, p2p_scatter_gather=False),
        ExecutionOptions(recompute="full"),  # the drain holds the recomputed forward too
        ExecutionOptions(recompute="selective", virtual_stages=2),
    ],
    ids=["v2", "v3", "v2-deepspeed-p2p", "recompute-full", "recompute-selective-v2"],
)
def test_search_scores_equal_the_simulators_estimates_when_interleaved(sim, options):
    """The search scores an interleaved candidate as the simulator does (the bubble / v, the
    p2p v times, the job's p2p style), so it ranks and bounds by the simulator's figures."""
    job = Job.create("OPT-350M", 1024, 2048, options=options)
    inventory = Inventory.parse(
        ["A100-40@us-central1-a=32", "V100-16@us-central1-a=32", "A100-40@us-west1-b=16"]
    )
    cv, scorer, memo = Planner(sim)._state(job)
    search = Search(cv, scorer, memo, inventory, SearchOptions(top_k=5))
    search.tight = False  # every placement the leaves reach is scored: more to compare
    found = search.run()
    assert len(found.scored) >= 10
    for s in found.scored[:60]:
        e = sim.estimate(job, build_plan(s))
        assert e.iteration_time_s == pytest.approx(s.iteration_s, rel=1e-12)
        assert e.cost_per_iteration_usd == pytest.approx(s.cost_per_iteration, rel=1e-12)


@pytest.mark.parametrize(
    "pools", [["A100-40@us-central1-a=4"], ["T4@us-central1-a=3", "V100-16@us-central1-a=2"]]
)
@pytest.mark.parametrize("objective", ["throughput", "cost"])
@pytest.mark.parametrize("v", [2, 3])
def test_deeper_interleaved_pipelines_are_optimal_too(sim, pools, objective, v):
    """tiny-gpt (8 layer ids) with up to 5 GPUs: pipelines of 2 and 3 stages, v = 3 leaving
    few layer splits, heterogeneous types; the bounds under interleaving (F = sum / v - B,
    possibly negative) prune nothing the exhaustive optimum needs."""
    job = _job("tiny-gpt", 12, 64, v)
    inventory = Inventory.parse(pools)
    options = SearchOptions(
        objective=objective, microbatch_sizes=(1, 2, 4), search_execution_options=False
    )
    best, scored = exhaustive_best(sim, job, inventory, options)
    assert scored > 500 and best is not None
    got = Planner(sim).plan(job, inventory, options).best
    if objective == "throughput":
        assert got.estimate.throughput_iters_per_s == pytest.approx(
            best.estimate.throughput_iters_per_s, rel=1e-9
        )
    else:
        assert got.estimate.cost_per_iteration_usd == pytest.approx(
            best.estimate.cost_per_iteration_usd, rel=1e-9
        )
