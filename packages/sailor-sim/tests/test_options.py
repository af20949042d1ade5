"""Execution options: each has a memory and a time term; bad combinations name the option."""

from __future__ import annotations

import pytest

from sailor_sim import Job, Plan, Simulator, StageSlice, ValidationError
from sailor_sim.spec.options import ExecutionOptions

A = "us-central1-a"
MODEL = "OPT-350M"


def job(dtype: str = "bf16", gbs: int = 64, **options) -> Job:
    return Job.create(MODEL, gbs, 2048, dtype, "adam", ExecutionOptions(**options))


def estimate(j: Job, gpu="A100-40", **plan):
    plan.setdefault("pp", 1)
    plan.setdefault("dp", 4)
    return Simulator().estimate(j, Plan.uniform(j, gpu, A, **plan))


def mem(e, term: str, stage: int = 0) -> int:
    return next(m for m in e.memory if m.stage == stage).breakdown_bytes[term]


def test_options_round_trip_json_and_proto():
    j = job(grad_dtype="bf16", recompute="selective", zero="zero2", sequence_parallel=True)
    assert Job.from_dict(j.to_dict()) == j
    assert Job.from_proto(j.to_proto()) == j
    forced = job(flash_attention=False, virtual_stages=2, p2p_scatter_gather=False)
    assert Job.from_proto(forced.to_proto()) == forced
    eager = job(fused_loss=False)
    assert Job.from_proto(eager.to_proto()) == eager and Job.from_dict(eager.to_dict()) == eager
    assert Job.from_proto(job().to_proto()).options.fused_loss is True  # unset: the default
    assert Job.from_proto(job().to_proto()).options.flash_attention is None  # default kept
    assert Job.from_dict({"model": MODEL, "global_batch_size": 8}).options == ExecutionOptions()


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: job(recompute="some"), "options.recompute"),
        (lambda: job(zero="zero4"), "options.zero"),
        (lambda: job("fp32", grad_dtype="bf16"), "options.grad_dtype"),
        (lambda: job("fp32", flash_attention=True), "options.flash_attention"),
        (lambda: job(virtual_stages=0), "options.virtual_stages"),
        (lambda: job(fused_loss="no"), "options.fused_loss"),
        (lambda: Job.from_dict({"model": MODEL, "global_batch_size": 8, "options": {"x": 1}}),
         "options"),
    ],
)  # fmt: skip
def test_bad_options_name_the_option(make, field):
    with pytest.raises(ValidationError) as err:
        make()
    assert err.value.field == field


def test_bad_combinations_with_the_plan_name_the_option():
    with pytest.raises(ValidationError, match="options.flash_attention: .*V100-16"):
        estimate(job("fp16", flash_attention=True), "V100-16")
    with pytest.raises(ValidationError, match="options.sequence_parallel"):
        estimate(job(sequence_parallel=True), tp=1)
    with pytest.raises(ValidationError, match="options.zero"):
        estimate(job(zero="zero3"), pp=2, dp=2)
    with pytest.raises(ValidationError, match="options.virtual_stages"):
        estimate(job(virtual_stages=2), pp=1)
    estimate(job("fp16"), "V100-16")  # the default skips flash where unsupported


def test_flash_attention_default_on_where_supported():
    on = estimate(job())  # bf16 on A100: on by default
    off = estimate(job(flash_attention=False))
    assert mem(on, "activations") < 0.7 * mem(off, "activations")  # no (a, s, s) scores
    assert on.time_breakdown_s["recompute"] > 0 == off.time_breakdown_s["recompute"]
    fp32 = estimate(job("fp32"))  # no flash in fp32
    assert fp32.time_breakdown_s["recompute"] == 0


@pytest.mark.parametrize("seq", [2048, 16384])
def test_attention_without_flash_pays_for_its_score_matrix(seq):
    """Without flash the (b, a, s, s) scores cross memory SCORE_PASSES_FORWARD times forward
    and SCORE_PASSES_BACKWARD times backward: slower than flash, which instead recomputes
    QK^T in backward, once the sequence is long; the gap is exactly that traffic."""
    from sailor_sim.catalog.gpus import get_gpu
    from sailor_sim.profiles import analytic

    def step(flash: bool):
        j = Job.create(
            "LLaMA-3.1-8B", 8, seq, "bf16", "adam", ExecutionOptions(flash_attention=flash)
        )
        return j, Simulator().stage_time(j, StageSlice(0, j.model.head_layer_id, "H100-80", 8, 1))

    (j, eager), (_, flash) = step(False), step(True)
    fwd, bwd = analytic.score_matrix_s(j.model, get_gpu("H100-80"), "bf16", 1, seq, 8)
    blocks = j.model.num_layers
    assert eager.forward_s - flash.forward_s == pytest.approx(blocks * fwd, rel=1e-9)
    assert eager.backward_s - flash.backward_s == pytest.approx(blocks * bwd, rel=1e-9)
    assert flash.recompute_s > 0 == eager.recompute_s  # flash rebuilds the scores instead
    if seq >= 16384:
        assert eager.per_microbatch_s > 1.3 * flash.per_microbatch_s


def test_recomputation_trades_memory_for_time():
    es = {
        r: estimate(job(recompute=r, flash_attention=False)) for r in ("none", "selective", "full")
    }
    acts = [mem(es[r], "activations") for r in ("none", "selective", "full")]
    extra = [es[r].time_breakdown_s["recompute"] for r in ("none", "selective", "full")]
    assert acts[0] > acts[1] > acts[2]
    assert extra[0] == 0 < extra[1] < extra[2]
    # full: one more forward of the blocks (layer ids 1..L) per microbatch
    j = job(recompute="full", flash_attention=False)
    blocks = Simulator().stage_time(j, StageSlice(1, j.model.num_layers, "A100-40", 1, 1)).forward_s
    assert extra[2] == pytest.approx(blocks * 64 / 4, rel=1e-9)


@pytest.mark.parametrize(
    ("zero", "sharded"),
    [
        ("zero1", {"optimizer_states"}),
        ("zero2", {"optimizer_states", "gradients", "weights"}),
        ("zero3", {"optimizer_states", "gradients", "weights"}),
    ],
)
def test_zero_shards_over_the_data_parallel_replicas(zero, sharded):
    base, z = estimate(job(), dp=4), estimate(job(zero=zero), dp=4)
    for term in ("weights", "gradients", "optimizer_states"):
        want = mem(base, term) // 4 if term in sharded else mem(base, term)
        assert mem(z, term) == pytest.approx(want, abs=4), term
    assert z.time_breakdown_s["optimizer"] < base.time_breakdown_s["optimizer"]
    assert mem(z, "transient") == mem(base, "transient")
    gathered = next(m for m in z.memory if m.stage == 0).breakdown_bytes.get("gathered_weights")
    if zero == "zero1":
        assert gathered is None
    if zero == "zero2":  # FSDP2 without resharding: every layer gathered forward to backward
        assert gathered == mem(base, "weights")
    if zero == "zero3":  # the parameter all-gathers move into every microbatch
        assert z.time_breakdown_s["dp_sync"] == 0
        assert 0 < gathered < mem(base, "weights")  # two layers of the stage
    else:
        assert z.time_breakdown_s["dp_sync"] > 0


def test_hybrid_shards_within_a_node_only():
    from sailor_sim import get_gpu

    per_node = get_gpu("A100-40").gpus_per_node // 2  # tp 2: replicas per node
    dp = 2 * per_node  # two nodes
    base = estimate(job(gbs=8 * dp), dp=dp, tp=2)
    hybrid = estimate(job(gbs=8 * dp, zero="hybrid"), dp=dp, tp=2)
    full = estimate(job(gbs=8 * dp, zero="zero3"), dp=dp, tp=2)
    want = mem(base, "optimizer_states") / per_node
    assert mem(hybrid, "optimizer_states") == pytest.approx(want, abs=4)
    assert mem(full, "optimizer_states") < mem(hybrid, "optimizer_states")
    assert hybrid.time_breakdown_s["dp_sync"] > 0  # across nodes: the shard's all-reduce


def test_sequence_parallelism_splits_the_replicated_activations():
    """Korthikanti et al. 2022 Table 2, selective recomputation, per block: 34 sbh / t with SP
    against sbh (10 + 24 / t) without: 8.5 / 16 = 0.53 at t = 4 (embedding and head aside)."""
    base = estimate(job(gbs=16, recompute="selective"), tp=4, dp=1)
    sp = estimate(job(gbs=16, recompute="selective", sequence_parallel=True), tp=4, dp=1)
    assert 0.45 < mem(sp, "activations") / mem(base, "activations") < 0.62
    assert sp.time_breakdown_s["tp_comm"] == base.time_breakdown_s["tp_comm"]  # RS+AG = AR


def test_sequence_parallelism_needs_tp_to_divide_the_sequence():
    """The engine refuses SP where TP does not divide a sequence's tokens (each rank holds
    an equal chunk): the simulator refused only tp 1, so `simulate --tp 8 --seq 2044 --sp`
    predicted a plan `sailor run` refuses (the planner's side: test_execution_options)."""
    odd = Job.create(MODEL, 16, 2044, "bf16", "adam", ExecutionOptions(sequence_parallel=True))
    with pytest.raises(ValidationError, match="do not divide") as e:
        Simulator().estimate(odd, Plan.uniform(odd, "A100-40", A, tp=8, pp=1, dp=1))
    assert e.value.field.endswith("sequence_parallel")
    assert Simulator().estimate(odd, Plan.uniform(odd, "A100-40", A, tp=4, pp=1, dp=1)).fits


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_an_eager_loss_holds_two_more_fp32_logits_copies_at_the_head(dtype):
    """The head stage's transient: the logits in the training dtype beside the stashed fp32
    softmax with the fused cross-entropy; 8 bytes per logit with an eager F.cross_entropy
    (torchtitan). Other stages and the step time do not change."""
    fused = estimate(job(dtype, gbs=8), pp=2, dp=1, microbatch_size=4)
    eager = estimate(job(dtype, gbs=8, fused_loss=False), pp=2, dp=1, microbatch_size=4)
    logits = 4 * 2048 * job(dtype).model.vocab_size  # one microbatch of 4
    width = 2 if dtype == "bf16" else 4
    assert mem(fused, "transient", stage=1) == logits * width
    assert mem(eager, "transient", stage=1) == logits * 8
    assert mem(eager, "transient", stage=0) == mem(fused, "transient", stage=0)
    assert eager.iteration_time_s == fused.iteration_time_s


def test_bf16_gradients_halve_gradient_memory_and_traffic():
    base, half = estimate(job()), estimate(job(grad_dtype="bf16"))
    assert mem(half, "gradients") * 2 == mem(base, "gradients")
    assert half.time_breakdown_s["dp_sync"] < base.time_breakdown_s["dp_sync"]


def test_interleaving_divides_the_bubble_and_multiplies_p2p():
    plain = estimate(job(gbs=64), pp=4, dp=1, microbatch_size=2)
    inter = estimate(job(gbs=64, virtual_stages=2), pp=4, dp=1, microbatch_size=2)
    b0, b1 = plain.time_breakdown_s, inter.time_breakdown_s
    # the other stages' fill/drain divides by v; which stage is the bottleneck may change
    # (v doubles the middle stages' p2p share of a step), so half within that stage's share
    assert b1["pipeline_bubble"] == pytest.approx(b0["pipeline_bubble"] / 2, rel=0.2)
    assert b1["pipeline_bubble"] < 0.6 * b0["pipeline_bubble"]
    assert b1["p2p"] > b0["p2p"]
    assert mem(inter, "activations") > mem(plain, "activations")  # more in flight at stage 0


def test_gradient_accumulation_is_the_plans_microbatch_count():
    j = job(gbs=64)
    plan = Plan.uniform(j, "A100-40", A, pp=1, dp=2, microbatch_size=4)
    assert plan.gradient_accumulation_steps == 64 // (2 * 4)


def test_every_option_combination_adds_up():
    for options in (
        {"recompute": "full", "zero": "zero1", "grad_dtype": "bf16"},
        {"recompute": "selective", "zero": "zero3"},
        {"sequence_parallel": True, "zero": "hybrid"},
    ):
        e = estimate(job(gbs=128, **options), dp=8, tp=2)
        assert e.iteration_time_s == sum(e.time_breakdown_s.values())
        for m in e.memory:
            assert sum(m.breakdown_bytes.values()) == m.peak_bytes


def test_interleaving_with_zero3_is_refused_naming_the_option():
    with pytest.raises(ValidationError, match="virtual_stages"):
        Job.create("OPT-350M", 64, 2048, "bf16", options={"virtual_stages": 2, "zero": "zero3"})


def test_options_no_gpu_of_an_inventory_can_run_are_named():
    from sailor_sim.catalog.gpus import get_gpu
    from sailor_sim.spec.options import check_options_on

    v100, a100 = get_gpu("V100-16"), get_gpu("A100-40")
    with pytest.raises(ValidationError, match="flash_attention"):
        check_options_on(ExecutionOptions(flash_attention=True), "fp16", [v100])
    check_options_on(ExecutionOptions(flash_attention=True), "fp16", [v100, a100])
