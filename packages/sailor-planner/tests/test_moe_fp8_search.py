"""The planner searches expert parallelism for mixture-of-experts jobs only, and FP8 jobs
(which refuse ZeRO-3) still get plans."""

from __future__ import annotations

from pathlib import Path

import pytest

from sailor_planner.errors import NoFeasiblePlanError
from sailor_planner.planner import Planner
from sailor_planner.request import SearchOptions
from sailor_planner.search.execution import expert_degrees, lean, variants
from sailor_sim import Inventory, Job, Plan, Simulator

A = "us-central1-a"
MIXTRAL = str(Path(__file__).parents[3] / "examples" / "configs" / "mixtral-8x7b" / "config.json")


def test_expert_degrees_only_for_moe_and_dividing_every_stage():
    dense = Job.create("LLaMA-3.1-8B", 64, 4096, "bf16")
    plan = Plan.uniform(dense, "H100-80", A, pp=2, dp=8, tp=1)
    assert expert_degrees(dense, plan) == (1,)
    assert {o.expert_parallel for o in variants(dense, plan)} == {1}
    moe = Job.create(MIXTRAL, 48, 4096, "bf16")
    six = Plan.uniform(moe, "H100-80", A, pp=2, dp=6, tp=1)
    assert expert_degrees(moe, six) == (1, 2)  # 4 and 8 do not divide 6 replicas
    assert lean(moe.options, moe.model.moe)[0].expert_parallel == 8
    assert lean(dense.options, dense.model.moe)[0].expert_parallel == 1


def test_a_moe_job_gets_expert_parallelism_and_no_more_memory_than_there_is():
    """Mixtral holds 47 B parameters: at 16 bytes of model states each (bf16 weights, fp32
    gradients, master weights and Adam) 747 GB, more than 8 x 80 GB hold however they are
    split; expert parallelism divides the experts, not their bytes, and ZeRO can shard an
    expert's states only over the ranks holding that expert (the planner once found an EP 8 +
    ZeRO plan 'fitting' there). On 16 H100s the best plan splits the experts 4 ways, ahead of
    every plan without EP."""
    job = Job.create(MIXTRAL, 64, 4096, "bf16")
    with pytest.raises(NoFeasiblePlanError, match="no plan fits in memory"):
        Planner(Simulator()).plan(job, Inventory.parse([f"H100-80@{A}=8"]), SearchOptions())
    result = Planner(Simulator()).plan(job, Inventory.parse([f"H100-80@{A}=16"]), SearchOptions())
    best = result.best
    assert best.estimate.fits and best.options.expert_parallel > 1
    assert best.estimate.time_breakdown_s["expert_comm"] > 0


def test_fp8_jobs_get_plans_without_zero3():
    job = Job.create("LLaMA-3.1-8B", 64, 4096, "fp8")
    inventory = Inventory.parse([f"H100-80@{A}=16"])
    result = Planner(Simulator()).plan(job, inventory, SearchOptions(search_execution_options=True))
    assert result.best.estimate.fits
    assert result.best.options.fp8 == "delayed" and result.best.options.zero != "zero3"


def test_context_parallelism_is_searched_for_long_sequences_only():
    from sailor_planner.search.execution import LEAN_CONTEXT_PARALLEL, LONG_SEQUENCE

    short = Job.create("LLaMA-3.1-8B", 16, 8192, "bf16")
    assert {o.context_parallel for o in lean(short.options, None, 8192)} == {1}
    long = Job.create("LLaMA-3.1-8B", 8, LONG_SEQUENCE * 4, "bf16")
    cps = [o.context_parallel for o in lean(long.options, None, long.sequence_length)]
    assert LEAN_CONTEXT_PARALLEL in cps
    inventory = Inventory.parse([f"H100-80@{A}=32"])
    result = Planner(Simulator()).plan(
        long, inventory, SearchOptions(search_execution_options=True)
    )
    best = result.best
    assert best.estimate.fits and best.options.context_parallel == LEAN_CONTEXT_PARALLEL
    # the plan's replicas take the global batch cp times over (each sample split cp ways)
    assert best.plan.samples_per_iteration == 8 * LEAN_CONTEXT_PARALLEL
