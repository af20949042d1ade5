"""Expert parallelism for mixture-of-experts models: memory per GPU, all-to-all time, the
gradient sync, and the combinations refused (naming the option)."""

from __future__ import annotations

from pathlib import Path

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
from sailor_sim.model.moe import all_to_all_time
from sailor_sim.simulate.network import LinkCurve
from sailor_sim.spec.options import ExecutionOptions

A = "us-central1-a"
MIXTRAL = str(Path(__file__).parents[3] / "examples" / "configs" / "mixtral-8x7b" / "config.json")


def job(ep: int = 1, model: str = MIXTRAL, **options) -> Job:
    opts = ExecutionOptions(expert_parallel=ep, recompute="full", **options)
    return Job.create(model, 64, 4096, "bf16", "adam", opts)


def estimate(j: Job, tp: int = 1, pp: int = 4, dp: int = 8):
    return Simulator().estimate(j, Plan.uniform(j, "H100-80", A, tp=tp, pp=pp, dp=dp))


def test_each_gpu_holds_one_ep_th_of_the_experts():
    model = job().model
    sim = Simulator()
    args = (StageSlice(1, model.num_layers, "H100-80", 1, 1), 0, 1, 1, 8)
    full, split = sim.replica_memory(job(1), *args), sim.replica_memory(job(8), *args)
    experts = sum(model.param_terms(i)["mlp_experts"] for i in range(1, model.num_layers + 1))
    assert full["weights"] - split["weights"] == (experts - experts // 8) * 2  # bf16 weights
    assert split["optimizer_states"] < full["optimizer_states"] / 4


def test_zero3_gathers_only_the_experts_of_the_rank_s_expert_group():
    """Under ZeRO-3 a layer is gathered from the ranks holding the same experts, so the
    gathered copy holds 1/ep of the routed experts; it was the whole layer, every expert."""
    model = job().model
    sim = Simulator()
    args = (StageSlice(1, model.num_layers, "H100-80", 1, 1), 0, 1, 1, 8)
    full = sim.replica_memory(job(1, zero="zero3"), *args)["gathered_weights"]
    split = sim.replica_memory(job(8, zero="zero3"), *args)["gathered_weights"]
    experts = model.param_terms(1)["mlp_experts"]
    assert full == 2 * model.params(1) * 2  # the layer in use and the one prefetched, bf16
    assert full - split == 2 * (experts - experts // 8) * 2


def test_all_to_all_costs_time_only_with_ep_and_more_across_nodes():
    assert estimate(job(1)).time_breakdown_s["expert_comm"] == 0
    # tp 1: the 8 ranks share one 8-GPU node; tp 2: 4 per node, half the traffic crosses nodes
    inside = estimate(job(8), tp=1).time_breakdown_s["expert_comm"]
    across = estimate(job(8), tp=2).time_breakdown_s["expert_comm"]
    assert 0 < inside < across


def test_gradient_sync_shrinks_with_ep():
    """Expert gradients are reduced over the replicas that hold the same experts only."""
    assert (
        estimate(job(8)).time_breakdown_s["dp_sync"] < estimate(job(1)).time_breakdown_s["dp_sync"]
    )


def test_all_to_all_time_is_physical():
    nvlink = LinkCurve(450e9, 10e-6, "test")
    nic = LinkCurve(50e9, 20e-6, "test")
    sizes = [1e6, 1e7, 1e8]
    times = [all_to_all_time(n, 8, 8, nvlink, nic) for n in sizes]
    assert times == sorted(times) and all(t > 0 for t in times)
    for n, t in zip(sizes, times, strict=True):  # never faster than the bytes leaving at line rate
        assert t >= n * 7 / 8 / 450e9
    assert all_to_all_time(1e8, 8, 4, nvlink, nic) > all_to_all_time(1e8, 8, 8, nvlink, nic)
    assert all_to_all_time(1e8, 1, 8, nvlink, nic) == 0


def test_refusals_name_the_option():
    with pytest.raises(ValidationError, match="has no experts") as e:
        job(2, model="LLaMA-3.1-8B")
    assert e.value.field == "options.expert_parallel"
    with pytest.raises(ValidationError, match="does not divide the 8 experts") as e:
        job(3)
    assert e.value.field == "options.expert_parallel"
    with pytest.raises(PlanError, match="does not divide the 6 replicas") as e:
        j = Job.create(MIXTRAL, 48, 4096, "bf16", "adam", ExecutionOptions(expert_parallel=4))
        Simulator().estimate(j, Plan.uniform(j, "H100-80", A, tp=1, pp=4, dp=6))
    assert e.value.field == "options.expert_parallel"
    j = job(8)
    assert Job.from_dict(j.to_dict()) == j and Job.from_proto(j.to_proto()) == j


def test_model_flops_count_the_activated_parameters():
    """MFU of a MoE run uses its active parameters: Mixtral's 6N is that of 12.9 B, not 46.7 B."""
    from sailor_sim.simulate.metrics import model_flops_per_token

    model = job().model
    per_token = model_flops_per_token(model, 4096)
    attention = 12 * model.num_layers * model.num_heads * model.head_dim * 4096
    n = (per_token - attention) / 6
    assert n == pytest.approx(model.active_params() - model.vocab_size * 4096, rel=0.01)
    dense = Job.create("LLaMA-3.1-8B", 8, 4096, "bf16").model
    assert (
        model_flops_per_token(dense, 4096)
        == 6.0 * dense.matmul_params() + 12 * 32 * 32 * 128 * 4096
    )


@pytest.mark.parametrize("zero", ["zero1", "zero3"])
def test_zero_shards_expert_states_only_over_the_ranks_holding_the_same_experts(zero):
    """Under EP 8 over 8 replicas each rank holds its own experts: ZeRO has no one to shard
    their states with (Megatron-Core's expert data-parallel group has dp / ep = 1 rank), so
    they stay whole while the dense parameters' states split 8 ways. Mixtral-8x7B on 8 H100s
    at EP 8 + ZeRO-1 used to 'fit' with the experts' Adam states sharded 8 ways too."""
    model = job().model
    sim = Simulator()
    args = (StageSlice(0, model.num_layer_ids - 1, "H100-80", 1, 1), 0, 1, 1, 8)
    alone = sim.replica_memory(job(8), *args)  # no ZeRO: every state whole
    sharded = sim.replica_memory(job(8, zero=zero), *args)
    held = sum(model.param_terms(i)["mlp_experts"] for i in range(1, model.num_layers + 1)) // 8
    dense = model.total_params() - 8 * held
    # Adam (2 x fp32) + fp32 master weights = 12 bytes per parameter
    assert alone["optimizer_states"] == (dense + held) * 12
    assert sharded["optimizer_states"] == dense * 12 // 8 + held * 12
    # with 16 replicas, two ranks hold each expert: their states split in two
    wider = sim.replica_memory(job(8, zero=zero), *args[:-1], 16)
    assert wider["optimizer_states"] == dense * 12 // 16 + held * 12 // 2
    j = job(8, zero="zero1")
    est = Simulator().estimate(j, Plan.uniform(j, "H100-80", A, tp=1, pp=1, dp=8))
    assert not est.fits  # ~47 GB of expert states alone per GPU, beside the weights


def test_an_expert_group_needs_one_tp_degree_and_one_microbatch_count():
    """Its ranks run the all-to-alls every layer of every microbatch together: a group with
    5 and 3 microbatches would hang, and was predicted."""
    j = job(2, zero="none")
    last = j.model.head_layer_id

    def plan(*counts_tps):
        reps = tuple(Replica("H100-80", A, tp, 1, n) for n, tp in counts_tps)
        return Plan((Stage(0, last, reps),))

    with pytest.raises(PlanError, match="one TP degree and one microbatch count") as err:
        Simulator().estimate(j, plan((40, 1), (24, 1)))
    assert err.value.field == "options.expert_parallel"
    with pytest.raises(PlanError, match="replicas 0..1 of stage 0"):
        Simulator().estimate(j, plan((32, 1), (32, 2)))
    # groups of two alike replicas run, whatever the next group holds
    assert Simulator().estimate(j, plan((20, 1), (20, 1), (12, 1), (12, 1))).iteration_time_s > 0
