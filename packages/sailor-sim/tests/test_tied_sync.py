"""A tied embedding over several stages: each step sums the embedding's and the head's
gradient copies, as the runtime's ``engine.parallel.tied`` does; the simulator charges it in
``step_sync``."""

from __future__ import annotations

import pytest

from sailor_sim import Job, Plan, Replica, Simulator, Stage
from sailor_sim.simulate.compose import tied_ends

A, B = "us-central1-a", "us-west1-b"


def _plan(first: list[Replica], last: list[Replica], layers: int) -> Plan:
    cut = layers // 2
    return Plan((Stage(0, cut - 1, tuple(first)), Stage(cut, layers - 1, tuple(last))))


def _rep(tp: int, zone: str = A) -> Replica:
    return Replica("A100-40", zone, tp, 1, 8)


@pytest.fixture(scope="module")
def job() -> Job:
    return Job.create("GPT-1.7B", 16, 2048, "bf16")  # tied: vocab 51200 x hidden 2304


def test_the_sum_is_charged_in_step_sync_and_only_over_stages(job) -> None:
    sim = Simulator()
    n = job.model.num_layer_ids
    two = _plan([_rep(1), _rep(1)], [_rep(1, B), _rep(1, B)], n)
    est = sim.estimate(job, two)
    tied = sim.tied_sync_time(job, tied_ends(two))
    assert tied > 0
    base = sim.plan_step_sync_time(two)
    assert est.time_breakdown_s["step_sync"] == pytest.approx(base + tied, rel=1e-12)
    one = Plan.uniform(job, "A100-40", A, pp=1, dp=2, tp=1)
    assert tied_ends(one) == () and sim.tied_sync_time(job, ()) == 0
    untied = Job.create("OPT-350M", 16, 2048, "bf16")
    assert sim.tied_sync_time(untied, tied_ends(two)) == 0


def test_pairs_move_a_tp_th_and_mixed_tp_the_whole_matrix(job) -> None:
    """Same TP at both ends: each (replica, TP rank) pair all-reduces 1/tp of the fp32
    [vocab, hidden] gradient (472 MB at TP 1) over its link; a TP mix makes both stages' ranks
    all-reduce the full matrix, which takes longer."""
    sim = Simulator()
    n = job.model.num_layer_ids
    tp1 = sim.tied_sync_time(job, tied_ends(_plan([_rep(1)], [_rep(1, B)], n)))
    tp2 = sim.tied_sync_time(job, tied_ends(_plan([_rep(2)], [_rep(2, B)], n)))
    mixed = sim.tied_sync_time(job, tied_ends(_plan([_rep(2)], [_rep(1, B)], n)))
    assert tp2 < tp1 < mixed
    # bandwidth-bound across regions: 472 MB at TP 1 takes a noticeable fraction of a second
    assert job.model.vocab_size * job.model.hidden_size * 4 == pytest.approx(472e6, rel=0.01)
    assert tp1 > 0.01
