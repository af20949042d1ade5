"""ZeRO-2/3 and hybrid sharding need one TP degree and one microbatch count per stage
(``simulate.features.sharding``): every rank of a shard group issues the same collectives every
microbatch. The simulator predicted such plans (mixed TP, 2 and 3 microbatches) that no
framework runs and the engine refused."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from sailor_sim import (
    ExecutionOptions,
    Job,
    Plan,
    PlanError,
    Replica,
    Simulator,
    Stage,
    hybrid_divides,
    sharding_problem,
)
from sailor_sim.cli.app import app

JOB = Job.create("OPT-350M", 16, 1024)
LAST = JOB.model.head_layer_id


def _plan(*replicas: Replica) -> Plan:
    return Plan((Stage(0, LAST, replicas),))


MIXED_TP = _plan(
    Replica("A100-40", "us-central1-a", 1, 2, 4), Replica("A100-40", "us-central1-a", 2, 2, 4)
)
UNEVEN = _plan(
    Replica("A100-40", "us-central1-a", 1, 2, 5), Replica("A100-40", "us-central1-a", 1, 2, 3)
)
EVEN = _plan(
    Replica("A100-40", "us-central1-a", 1, 2, 4), Replica("V100-16", "us-central1-a", 1, 2, 4)
)


def _job(zero: str) -> Job:
    return Job.create("OPT-350M", 16, 1024, options=ExecutionOptions(zero=zero))


@pytest.mark.parametrize("zero", ["zero2", "zero3", "hybrid"])
@pytest.mark.parametrize(
    "plan,words",
    [(MIXED_TP, "needs one TP degree"), (UNEVEN, "every replica needs the same count")],
)
def test_sharded_zero_refuses_stages_it_cannot_run(zero, plan, words) -> None:
    with pytest.raises(PlanError, match=words) as err:
        Simulator().estimate(_job(zero), plan)
    assert err.value.field == "options.zero"
    assert zero in str(err.value) and "use zero1" in str(err.value)


@pytest.mark.parametrize("plan", [MIXED_TP, UNEVEN])
def test_zero1_and_plain_data_parallel_run_any_stage(plan) -> None:
    for zero in ("none", "zero1"):
        assert sharding_problem(zero, plan) is None
        assert Simulator().estimate(_job(zero), plan).iteration_time_s > 0


def test_one_tp_and_one_count_shard_across_gpu_types() -> None:
    for zero in ("zero2", "zero3"):
        assert Simulator().estimate(_job(zero), EVEN).iteration_time_s > 0


def test_hybrid_groups_must_divide_the_replicas() -> None:
    """Hybrid shards inside a node (8 A100s at TP 2: groups of 4) and replicates across
    groups, so 6 replicas are refused and 8 run."""
    six = _plan(*[Replica("A100-40", "us-central1-a", 2, 1, 2)] * 6)
    job = Job.create("OPT-350M", 12, 1024, options=ExecutionOptions(zero="hybrid"))
    with pytest.raises(PlanError, match="groups of 4 replicas .* do not divide stage 0's 6"):
        Simulator().estimate(job, six)
    assert sharding_problem("zero3", six) is None
    eight = _plan(*[Replica("A100-40", "us-central1-a", 2, 1, 2)] * 8)
    job = Job.create("OPT-350M", 16, 1024, options=ExecutionOptions(zero="hybrid"))
    assert Simulator().estimate(job, eight).iteration_time_s > 0


def test_the_cli_names_the_option_in_one_line(tmp_path) -> None:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"job": _job("zero3").to_dict(), "plan": UNEVEN.to_dict()}))
    r = CliRunner().invoke(app, ["simulate", str(path)])
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and "options.zero" in lines[0] and "use zero1" in lines[0], r.output


def test_the_replicas_must_match_where_collectives_run_every_microbatch():
    """``ExecutionOptions.uniform_replicas``: the planner's balance follows the same rule as
    ``sharding_problem`` and the expert-group check (one TP degree, one microbatch count)."""
    zeros = ("none", "zero1", "zero2", "zero3", "hybrid")
    uniform = {z: ExecutionOptions(zero=z).uniform_replicas for z in zeros}
    assert uniform == {"none": False, "zero1": False, "zero2": True, "zero3": True, "hybrid": True}
    assert ExecutionOptions(expert_parallel=2).uniform_replicas
    # A100-40 nodes hold 8 GPUs: 4 replicas of TP 2 per group
    assert hybrid_divides("A100-40", 2, 8) and not hybrid_divides("A100-40", 2, 6)
    assert hybrid_divides("A100-40", 2, 3)  # fewer replicas than a node: one group of them
