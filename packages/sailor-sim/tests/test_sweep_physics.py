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
