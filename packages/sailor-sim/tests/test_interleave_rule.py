"""Interleaved 1F1B's feasibility rule (``sailor_sim.spec.interleave``): the simulator refuses
the plans Megatron's interleaved schedule cannot run, with a PlanError naming virtual_stages
and the fix, as it refuses other infeasible plans; it prices the ones it can."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sailor_sim import ExecutionOptions, Job, Plan, PlanError, Replica, Simulator, Stage
from sailor_sim.spec import interleave
from sailor_sim.spec.interleave import chunk_layers, chunk_sizes, interleave_problem

A = "us-central1-a"


def job(v: int, gbs: int = 16, model: str = "OPT-350M") -> Job:
    return Job.create(model, gbs, 1024, options=ExecutionOptions(virtual_stages=v))


def plan(bounds, counts, mbs: int = 1) -> Plan:
    def reps():
        return tuple(Replica("A100-40", A, 1, mbs, c) for c in counts)

    return Plan(tuple(Stage(a, b, reps()) for a, b in bounds))


HALVES = ((0, 12), (13, 25))  # OPT-350M: layer ids 0..25 (24 blocks)


@pytest.mark.parametrize("v", [2, 3, 4])
def test_simulator_prices_plans_interleaving_runs_on(v):
    e = Simulator().estimate(job(v), plan(HALVES, [8, 8]))
    assert e.iteration_time_s > 0


@pytest.mark.parametrize(
    ("make", "words"),
    [
        # one stage: nothing to interleave with
        (lambda: plan(((0, 25),), [16]), "(>= 2 pipeline stages)"),
        # 2 stages, pipelines of 5 and 11 microbatches: not multiples of 2
        (lambda: plan(HALVES, [5, 11]), "not a multiple of its 2 stages"),
        # 3 stages, 4 + 12 microbatches: 4 is not a multiple of 3
        (lambda: plan(((0, 8), (9, 16), (17, 25)), [4, 12]), "not a multiple of its 3 stages"),
        # stage 1 holds one block: no layer for its second chunk
        (lambda: plan(((0, 23), (24, 24), (25, 25)), [12, 12]), "stage 1 holds 1 layer ids"),
    ],
)
def test_simulator_refuses_what_interleaving_cannot_run(make, words):
    with pytest.raises(PlanError) as err:
        Simulator().estimate(job(2, gbs=24 if "stage 1" in words else 16), make())
    assert err.value.field == "options.virtual_stages"
    message = str(err.value)
    assert words in message
    assert "virtual_stages" in message and "use " in message  # names the option and the fix


def test_the_same_plans_run_without_interleaving():
    Simulator().estimate(job(1), plan(HALVES, [5, 11]))
    Simulator().estimate(job(1), plan(((0, 25),), [16]))


def test_chunks_hold_a_layer_each_with_embedding_first_and_head_last():
    # tiny-gpt's layout: layer ids 0..7 (6 blocks) on 2 stages of 4 ids, 2 chunks each
    assert chunk_layers([(0, 3), (4, 7)], 7, 2) == [[(0, 2), (5, 5)], [(3, 4), (6, 7)]]
    assert chunk_sizes(0, 1, 7, 2) == [2, 0]  # embedding + 1 block: chunk 1 gets nothing
    assert chunk_sizes(6, 7, 7, 2) == [1, 1]  # 1 block + head
    with pytest.raises(PlanError, match="stage 0 holds 2 layer ids"):
        chunk_layers([(0, 1), (2, 7)], 7, 2)


def test_every_range_is_judged_as_chunk_layers_cuts_it():
    """``stage_problem`` says a range is fine exactly when ``chunk_sizes`` has no empty chunk,
    for every range of a small model and v up to 4."""
    head = 9
    for v in (1, 2, 3, 4):
        for a in range(head + 1):
            for b in range(a, head + 1):
                ok = min(chunk_sizes(a, b, head, v)) > 0
                assert (interleave.stage_problem(0, a, b, head, v) is None) == ok
                assert sum(chunk_sizes(a, b, head, v)) == b - a + 1


def test_one_statement_of_the_rule():
    """``check_replica`` (the planner's shape filter) words the depth rule as
    ``interleave_problem`` does, and v = 1 accepts every plan."""
    from sailor_sim import check_replica, get_gpu

    with pytest.raises(Exception) as err:
        check_replica(ExecutionOptions(virtual_stages=2), get_gpu("A100-40"), "bf16", 1, 1)
    assert interleave.depth_problem(2, 1) in str(err.value)
    assert interleave_problem(plan(((0, 25),), [16]), 25, 2) == interleave.depth_problem(2, 1)
    assert interleave_problem(plan(HALVES, [5, 11]), 25, 1) is None


def test_the_rule_is_torch_free():
    code = "import sys, sailor_sim.spec.interleave; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("num_layers", [1, 2, 3, 4, 7, 24])
def test_most_chunks_is_the_most_any_two_stage_split_cuts(num_layers: int) -> None:
    """The job's bound is the rule's: some split of the layer ids into >= 2 stages runs
    ``most_chunks`` virtual stages, none runs one more (two stages need the fewest blocks)."""
    head = num_layers + 1

    def some_split_runs(v: int) -> bool:
        return any(
            interleave.stage_problem(0, 0, cut, head, v) is None
            and interleave.stage_problem(1, cut + 1, head, head, v) is None
            for cut in range(head)
        )

    most = interleave.most_chunks(num_layers)
    assert most == 1 or some_split_runs(most)
    assert not some_split_runs(most + 1)


def test_job_refuses_more_virtual_stages_than_the_model_has_layers_for() -> None:
    job(12)  # OPT-350M: 24 blocks, 12 chunks of two stages
    with pytest.raises(ValueError, match=r"options\.virtual_stages: .*at most 12") as err:
        job(4_000_000_000)
    assert "use virtual_stages <= 12" in str(err.value)
