"""Context parallelism (ring attention): activations divided by cp, work conserved, the KV
exchange hidden behind attention only when the attention is long enough, refusals."""

from __future__ import annotations

import pytest

from sailor_sim import (
    Job,
    Plan,
    PlanError,
    Replica,
    Simulator,
    Stage,
    StageSlice,
    ValidationError,
)
from sailor_sim.simulate.features.context_parallel import attention_extra_flops, kv_exchange_exposed
from sailor_sim.simulate.network import LinkCurve
from sailor_sim.spec.options import ExecutionOptions

A = "us-central1-a"
MODEL = "LLaMA-3.1-8B"


def job(cp: int = 1, seq: int = 65536, gbs: int = 16, **options) -> Job:
    opts = ExecutionOptions(context_parallel=cp, recompute="full", **options)
    return Job.create(MODEL, gbs, seq, "bf16", "adam", opts)


def estimate(j: Job, tp: int = 2, dp: int = 8, gpu: str = "H100-80"):
    return Simulator().estimate(j, Plan.uniform(j, gpu, A, tp=tp, dp=dp))


def test_activations_divide_by_cp_and_the_plan_needs_cp_times_the_samples():
    sim = Simulator()
    model = job().model
    args = (StageSlice(0, model.head_layer_id, "H100-80", 2, 1), 0, 1, 1, 8)
    one = sim.replica_memory(job(1), *args)["activations"]
    four = sim.replica_memory(job(4), *args)["activations"]
    assert four * 4 == pytest.approx(one, rel=1e-6)
    plan = Plan.uniform(job(4), "H100-80", A, tp=2, dp=8)
    assert plan.samples_per_iteration == 16 * 4 == job(4).sample_slots
    with pytest.raises(PlanError, match="x context_parallel 4"):
        Plan.uniform(job(1), "H100-80", A, tp=2, dp=8).check(job(4))


def test_total_work_is_conserved_and_attention_sees_every_key():
    times = [estimate(job(cp)).time_breakdown_s["compute"] for cp in (1, 2, 4)]
    assert times[1] == pytest.approx(times[0], rel=0.01)
    assert times[2] == pytest.approx(times[0], rel=0.01)
    model = job().model
    # the cp ranks together do the (causal) attention of the whole sequence once
    whole = model.causal_attention_flops(1, 65536)
    extra = attention_extra_flops(model, 1, 65536, 1, 4)
    local = model.causal_attention_flops(1, 65536 // 4) + extra
    assert 4 * local == pytest.approx(whole)


def test_kv_exchange_is_hidden_by_long_attention_and_exposed_on_slow_links():
    model = job().model
    fast, slow = LinkCurve(450e9, 10e-6, "test"), LinkCurve(5e9, 30e-6, "test")
    args = (model, 32, 1)
    long_fast = kv_exchange_exposed(*args, 65536, 1, 4, 2, fast, 400e12)
    long_slow = kv_exchange_exposed(*args, 65536, 1, 4, 2, slow, 400e12)
    short_slow = kv_exchange_exposed(*args, 4096, 1, 4, 2, slow, 400e12)
    assert long_fast == 0 and short_slow > 0
    assert long_slow <= kv_exchange_exposed(*args, 65536, 1, 4, 2, LinkCurve(1e9, 30e-6, "t"), 4e14)
    assert kv_exchange_exposed(*args, 65536, 1, 1, 2, slow, 400e12) == 0  # no CP, no ring
    # end to end: a CP group spanning nodes (tp 8 x cp 2) exposes some of it at 8k tokens
    e = estimate(job(2, seq=8192, gbs=8), tp=8, dp=2)
    assert e.time_breakdown_s["context_comm"] > 0


def test_refusals_name_the_option():
    with pytest.raises(ValidationError) as e:
        job(3, seq=4100)
    assert e.value.field == "options.context_parallel"
    with pytest.raises(ValidationError) as e:
        job(2, flash_attention=False)
    assert e.value.field == "options.context_parallel"
    with pytest.raises(ValidationError) as e:
        estimate(Job.create(MODEL, 8, 8192, "fp32", options={"context_parallel": 2}), dp=2)
    assert e.value.field == "options.context_parallel"
    j = job(2, gbs=6)
    with pytest.raises(PlanError, match="does not divide the 3 replicas"):
        estimate(j, dp=3)
    mixed = Stage(
        0,
        j.model.head_layer_id,
        (Replica("H100-80", A, 2, 1, 6), Replica("H100-80", A, 4, 1, 6)),
    )
    with pytest.raises(PlanError, match="form a context-parallel group") as err:
        Simulator().estimate(j, Plan((mixed,)))
    assert err.value.field == "options.context_parallel"
    assert Job.from_proto(j.to_proto()) == j and Job.from_dict(j.to_dict()) == j
