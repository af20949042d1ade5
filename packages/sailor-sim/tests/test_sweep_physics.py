"""Physics checks from a capacity-planning sweep (Llama-3.1-70B/405B-shaped, DeepSeek-V3,
Mixtral-8x7B): each test states the first-principles arithmetic it checks."""

from __future__ import annotations

import pytest

from sailor_sim import Job, Plan, Simulator
from sailor_sim.spec.options import ExecutionOptions

A = "us-central1-a"


def _activations(e, stage: int) -> int:
    return next(m for m in e.memory if m.stage == stage).breakdown_bytes["activations"]


def test_interleaving_keeps_megatrons_chunks_in_flight_on_every_stage():
    """Megatron-LM's interleaved 1F1B (core/pipeline_parallel/schedules.py,
    forward_backward_pipelining_with_interleaving) runs num_warmup_microbatches =
    (p - rank - 1) * 2 + (v - 1) * p forward chunks (capped at the M * v chunks) before its
    first backward, so rank i holds min(that + 1, M v) chunks of 1/v of its layers each. Stage
    0 of 4 with v = 2: (6 + 4 + 1) / 2 = 5.5 stage activations vs 4 under 1F1B (Korthikanti
    et al. 2022's 1 + (p - 1) / (p v) = 1.375); the last stage: (0 + 4 + 1) / 2 = 2.5 vs 1.
    The last stage's memory had stayed at 1F1B's one microbatch."""
    plans = {}
    for v in (1, 2):
        job = Job.create("LLaMA-2-7B", 64, 2048, "bf16", options=ExecutionOptions(virtual_stages=v))
        plans[v] = Simulator().estimate(job, Plan.uniform(job, "A100-80", A, pp=4, dp=1, tp=1))
    # 32 blocks over 4 stages: stages 1 and 2 hold blocks only (the ends hold embedding/head)
    for stage, chunks in ((1, 2 * 2 + 4 + 1), (2, 2 * 1 + 4 + 1)):
        plain = _activations(plans[1], stage) / (4 - stage)  # one microbatch of the stage
        assert _activations(plans[2], stage) == pytest.approx(plain * chunks / 2, rel=1e-6)
    last_plain, last_inter = _activations(plans[1], 3), _activations(plans[2], 3)
    assert last_inter == pytest.approx(last_plain * 5 / 2, rel=1e-6)


MIXTRAL = "examples/configs/mixtral-8x7b"


def _repo_path(rel: str) -> str:
    from pathlib import Path

    return str(Path(__file__).resolve().parents[3] / rel)


def test_the_optimizer_steps_only_the_experts_a_rank_holds():
    """Adam is memory bound: its step reads and writes every parameter the rank holds
    (``analytic.ADAM_BYTES_PER_PARAM`` per parameter). Under expert parallelism a rank holds
    1/ep of the routed experts (its weights, gradients and optimizer states are 1/ep), so its
    step is over (non-expert + experts / ep) parameters. Mixtral-8x7B, 8 blocks of a stage
    at EP 8: 0.77 B parameters held of 5.83 B; the step had stayed that of all 5.83 B."""
    from sailor_sim import StageSlice
    from sailor_sim.model.moe import experts_held_elsewhere

    steps, model = {}, None
    for ep in (1, 8):
        job = Job.create(_repo_path(MIXTRAL), 64, 4096, "bf16", "adam",
                         ExecutionOptions(expert_parallel=ep))  # fmt: skip
        model = job.model
        steps[ep] = Simulator().stage_time(job, StageSlice(1, 8, "H100-80", 1, 1)).optimizer_s
    total = sum(model.params(i) for i in range(1, 9))
    held = total - sum(experts_held_elsewhere(model, i, i, 1, 8) for i in range(1, 9))
    assert steps[8] == pytest.approx(steps[1] * held / total, rel=1e-6)


def test_zero_shards_the_experts_step_over_the_expert_data_parallel_ranks():
    """ZeRO-1 over d replicas of a stage at EP ep: the non-expert states are sharded over d
    ranks, the experts' (held by d / ep ranks each) over d / ep (Megatron-Core's expert
    data-parallel group; ``memory`` already shards them so). Mixtral-8x7B, d = 8, ep = 8: each
    rank steps 1/8 of the non-expert parameters and all of its one expert, i.e. 1/8 of the
    stage's parameters: the step of EP 1 without ZeRO / 8."""
    from sailor_sim import StageSlice
    from sailor_sim.simulate import timing

    def step(ep: int, zero: str) -> float:
        job = Job.create(_repo_path(MIXTRAL), 64, 4096, "bf16", "adam",
                         ExecutionOptions(expert_parallel=ep, zero=zero))  # fmt: skip
        sim, s = Simulator(), StageSlice(1, 8, "H100-80", 1, 1)
        plan = Plan.uniform(job, "H100-80", A, pp=1, dp=8)
        kinds = timing.ring_kinds(plan.stages[0].replicas)
        return sim.sharded_time(job, s, sim.stage_time(job, s), kinds, ("H100-80", 1)).optimizer_s

    assert step(8, "zero1") == pytest.approx(step(1, "none") / 8, rel=1e-6)
    assert step(1, "zero1") == pytest.approx(step(1, "none") / 8, rel=1e-6)


def test_model_flops_count_mlas_own_head_dims():
    """PaLM's 12 L H Q T (Appendix B) is 6 L H (d_qk + d_v) T: QK^T over d_qk and the context
    over d_v, forward and backward. DeepSeek-V3's MLA (arXiv 2412.19437, Sec. 2.1; its
    config.json) has 128 heads with d_qk = 128 + 64 = 192 and d_v = 128, so at 4096 tokens
    the attention term is 6 x 61 x 128 x 320 x 4096 = 61.4 GFLOP per token; hidden / heads = 56
    gave 12 x 61 x 7168 x 4096 = 21.5 GFLOP and an MFU 14 % low. A model without MLA keeps
    12 L H Q T."""
    from sailor_sim import get_model
    from sailor_sim.simulate.metrics import model_flops_per_token

    v3 = get_model(_repo_path("examples/configs/deepseek-v3"))
    dense = 6.0 * (v3.matmul_params() - (v3.total_params() - v3.active_params()))
    assert model_flops_per_token(v3, 4096) == pytest.approx(
        dense + 6 * 61 * 128 * (192 + 128) * 4096, rel=1e-9
    )
    llama = get_model("LLaMA-3.1-70B")
    assert model_flops_per_token(llama, 8192) == pytest.approx(
        6.0 * llama.matmul_params() + 12 * 80 * 8192 * 8192, rel=1e-9
    )


@pytest.mark.parametrize("dp", [8, 16])
def test_expert_gradients_reduce_over_the_expert_data_parallel_ranks_only(dp):
    """Without ZeRO a stage's d replicas ring-all-reduce their gradients, 2 (d - 1) / d of the
    bytes per rank. The routed experts a rank holds are held by d / ep ranks only
    (Megatron-Core's expert data-parallel group), which all-reduce them: 2 (d/ep - 1) / (d/ep)
    of their bytes, i.e. on the stage's ring their bytes x ((d/ep - 1) / (d/ep)) / ((d - 1) / d).
    Mixtral-8x7B at EP 8: with d = 8 every expert has one holder and its gradients need no
    reduction (the sim reduced all 1/8 of them over the 8 ranks); with d = 16, 8/15 of them."""
    from sailor_sim.model.moe import experts_held
    from sailor_sim.simulate import timing

    job = Job.create(_repo_path(MIXTRAL), 128, 4096, "bf16", "adam",
                     ExecutionOptions(expert_parallel=8))  # fmt: skip
    sim = Simulator()
    plan = Plan.uniform(job, "H100-80", A, pp=4, dp=dp)
    stage = plan.stages[1]
    first, last = stage.first_layer, stage.last_layer
    experts = 4 * experts_held(job.model, first, last, 1, 8)  # fp32 main grads
    others = sim.grad_bytes(job, first, last) - experts
    n_e = dp // 8
    share = ((n_e - 1) / n_e) / ((dp - 1) / dp)
    kinds = timing.ring_kinds(stage.replicas)
    expected = sim.ring_time(job, first, last, kinds, others + experts * share)[0]
    assert sim.dp_sync_time(job, first, last, stage.replicas) == pytest.approx(expected, rel=1e-9)
