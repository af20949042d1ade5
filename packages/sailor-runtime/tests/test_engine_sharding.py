"""FSDP2 (ZeRO-2, ZeRO-3, hybrid shard) and sequence parallelism, each against one process
(gloo ranks, one ``launch_many``), with the tolerance of ``test_engine_equivalence`` (1e-5
relative on the losses), and the engine's refusal of the plans it cannot run them on.

tiny-llama (RMSNorm, RoPE, SwiGLU, GQA), global batch 8, sequence 32.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
import torch

from sailor_runtime.engine import EngineError, TrainConfig, launch_many, reference_run
from sailor_runtime.engine.checkpoints import checkpoint as ckpt
from sailor_runtime.engine.examples import JOBS, R
from sailor_runtime.engine.options import supports, unsupported_reason
from sailor_sim import ExecutionOptions, Job
from sailor_sim import ExecutionOptions as SimOptions
from sailor_sim.spec.plan import Plan, Replica, Stage

STEPS = 4
JOB = JOBS["llama"]
# Two replicas of different microbatch size (6 + 2 samples), one microbatch count.
DP2 = Plan((Stage(0, 7, (R(1, 3, 2), R(1, 1, 2))),))
DP2_TP2 = Plan((Stage(0, 7, (R(2, 2, 2), R(2, 2, 2))),))
# T4 nodes hold 4 GPUs = 2 replicas of TP 2: hybrid shards over pairs, replicates across them.
HYBRID = Plan((Stage(0, 7, tuple(Replica("T4", "local", 2, 1, 2) for _ in range(4))),))
# One-GPU nodes (what `sailor run --local` workers are): hybrid = shard groups of 1, replicated.
HYBRID_1 = Plan((Stage(0, 7, tuple(Replica("cpu-1t", "local", 1, 4, 1) for _ in range(2))),))
# Sequence parallelism: TP 2 and TP 4 replicas of one stage; and a two-stage pipeline.
SP_MIXED = Plan((Stage(0, 7, (R(2, 2, 2), R(4, 4, 1))),))
SP_PIPELINE = Plan((Stage(0, 3, (R(2, 4, 2),)), Stage(4, 7, (R(2, 4, 2),))))
# Interleaved 1F1B (2 chunks per rank) under ZeRO-1, sequence parallelism and recomputation,
# two replicas of different microbatch size per stage.
INTERLEAVED = Plan((Stage(0, 3, (R(2, 3, 2), R(2, 1, 2))), Stage(4, 7, (R(2, 3, 2), R(2, 1, 2)))))
JOB_V2 = Job.create("tiny-llama", 8, 32, options=SimOptions(virtual_stages=2))
# ZeRO-2 under pipelining: two stages of different TP degree (2 + 4 ranks), each stage's two
# replicas of different microbatch size (3 and 1 samples, 2 microbatches each).
ZERO2_PP = Plan((Stage(0, 3, (R(1, 3, 2), R(1, 1, 2))), Stage(4, 7, (R(2, 3, 2), R(2, 1, 2)))))

RUNS: dict[str, tuple[Plan, dict, int]] = {
    "zero3": (DP2, {"zero": "zero3"}, STEPS),
    "zero2": (DP2, {"zero": "zero2"}, STEPS),
    "zero3_tp2": (DP2_TP2, {"zero": "zero3"}, STEPS),
    "hybrid": (HYBRID, {"zero": "hybrid"}, STEPS),
    "hybrid_1": (HYBRID_1, {"zero": "hybrid"}, STEPS),
    "sp_mixed": (SP_MIXED, {"sequence_parallel": True}, STEPS),
    "sp_zero3": (DP2_TP2, {"sequence_parallel": True, "zero": "zero3"}, STEPS),
    "sp_pipeline": (SP_PIPELINE, {"sequence_parallel": True, "recompute": "full"}, STEPS),
    "sp_interleaved_zero1": (
        INTERLEAVED,
        {"sequence_parallel": True, "recompute": "full", "zero": "zero1", "virtual_stages": 2},
        STEPS,
    ),
    # torch.optim.AdamW(fused=True) on the DTensor shards (what CUDA ranks run), resumed at 2
    "zero3_fused_first": (DP2, {"zero": "zero3"}, 2),
    "zero3_fused": (DP2, {"zero": "zero3"}, STEPS),
    "zero3_bf16": (DP2, {"zero": "zero3", "precision": "bf16"}, STEPS),
    # ZeRO-3 saves at step 2 (gathered TP shards) and resumes into ZeRO-3, then the same
    # checkpoint format is read by a plan without FSDP.
    "zero3_first": (DP2_TP2, {"zero": "zero3"}, 2),
    "zero3_resumed": (DP2_TP2, {"zero": "zero3"}, STEPS),
    "zero2_pp": (ZERO2_PP, {"zero": "zero2"}, STEPS),
    # saved at step 2 (each stage's shards gathered over its own mesh) and resumed
    "zero2_pp_first": (ZERO2_PP, {"zero": "zero2"}, 2),
    "zero2_pp_resumed": (ZERO2_PP, {"zero": "zero2"}, STEPS),
}
SHARED_CKPT = {
    "zero3_first": "resume",
    "zero3_resumed": "resume",
    "zero2_pp_first": "resume_pp",
    "zero2_pp_resumed": "resume_pp",
    "zero3_fused_first": "fused",
    "zero3_fused": "fused",
}
FUSED = {"zero3_fused_first", "zero3_fused"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("sharding")
    spec = []
    for name, (plan, options, steps) in RUNS.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        spec.append(
            {
                "job": (JOB_V2 if options.get("virtual_stages") else JOB).to_dict(),
                "plan": plan.to_dict(),
                "steps": steps,
                "checkpoint_dir": str(root / SHARED_CKPT.get(name, name) / "ckpt"),
                "checkpoint_every": 2,
                "precision": options.get("precision"),
                "options": {k: v for k, v in options.items() if k != "precision"},
                "metrics": str(root / name / "metrics.jsonl"),
                "optimizer_impl": "torch-fused" if name in FUSED else "sailor",
                "memory_probe_step": 2,
            }
        )
    if launch_many(spec, log_dir=root / "logs"):
        pytest.fail(f"ranks failed:\n{(root / 'logs' / 'ranks.log').read_text()[-5000:]}")
    return root


@pytest.fixture(scope="module")
def reference():
    return reference_run(JOB, steps=STEPS)


@pytest.fixture(scope="module")
def reference_bf16():
    return reference_run(JOB, steps=STEPS, precision="bf16")


def _losses(root: Path, name: str) -> torch.Tensor:
    frame = pl.read_ndjson(root / name / "metrics.jsonl").sort("step")
    return torch.tensor(frame["loss"].to_list(), dtype=torch.float64)


def _close(got: torch.Tensor, want, rtol: float = 1e-5) -> None:
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=rtol, atol=0)


@pytest.mark.parametrize("name", ["zero3", "zero2", "zero3_tp2", "hybrid", "hybrid_1", "zero2_pp"])
def test_fsdp_matches_single_process(runs, reference, name):
    losses, model = reference
    _close(_losses(runs, name), losses)
    # The checkpoint holds the TP shards gathered from the DP shards: the one-process weights.
    path, _ = ckpt.latest(runs / name / "ckpt")
    saved = ckpt.read_full(path)
    for lid in range(JOB.model.num_layer_ids):
        for pname, want in model.layer_params(lid).items():
            got = saved[ckpt.key(lid, "params", pname)]
            torch.testing.assert_close(got, want.detach(), rtol=1e-4, atol=1e-5, msg=pname)


def test_fsdp_with_fused_adamw_resumed_and_bf16(runs, reference, reference_bf16):
    """torch's fused AdamW on the DTensor shards (the CUDA default), saved at step 2 and
    resumed with its step counters on the parameters' device; bf16 autocast with fp32 master
    weights against one process under the same autocast (the bar of test_engine_options)."""
    fused = torch.cat([_losses(runs, "zero3_fused_first"), _losses(runs, "zero3_fused")])
    _close(fused, reference[0])
    _close(_losses(runs, "zero3_bf16"), reference_bf16[0], rtol=2e-3)


@pytest.mark.parametrize("name", ["zero3", "zero2"])
def test_fsdp_really_shards_weights_gradients_and_states(runs, reference, name):
    """Rank 0's tensors at the start of step 2 (``memprobe``): half of the model's weights,
    gradients and AdamW states over the 2 replicas (FSDP pads dim 0 to an even size)."""
    model_bytes = sum(p.numel() * 4 for p in reference[1].parameters())
    memory = json.loads((runs / name / "metrics.jsonl.rank0.memory.json").read_text())
    for term, copies in (("weights", 1), ("gradients", 1), ("optimizer_states", 2)):
        assert memory[term] == pytest.approx(copies * model_bytes / 2, rel=0.02), term


@pytest.mark.parametrize("name", ["sp_mixed", "sp_pipeline", "sp_zero3", "sp_interleaved_zero1"])
def test_sequence_parallel_matches_single_process(runs, reference, name):
    _close(_losses(runs, name), reference[0])


def test_zero3_resumes_from_its_checkpoint(runs):
    """Saved at step 2 (AdamW states gathered), resumed and re-sharded: the same losses as
    the uninterrupted ZeRO-3 run of the same plan, bit for bit."""
    first, second = _losses(runs, "zero3_first"), _losses(runs, "zero3_resumed")
    assert len(first) == 2 and len(second) == STEPS - 2
    assert torch.equal(torch.cat([first, second]), _losses(runs, "zero3_tp2"))


def test_zero2_under_pipelining_resumes_and_shards_each_stage(runs, reference):
    """ZeRO-2 over two stages, saved at step 2 and resumed: the uninterrupted run's losses bit
    for bit; each stage's ranks hold half of their own stage's AdamW states."""
    first, second = _losses(runs, "zero2_pp_first"), _losses(runs, "zero2_pp_resumed")
    assert len(first) == 2 and len(second) == STEPS - 2
    assert torch.equal(torch.cat([first, second]), _losses(runs, "zero2_pp"))
    model = reference[1]
    stage0 = sum(p.numel() * 4 for lid in range(4) for p in model.layer_params(lid).values())
    memory = json.loads((runs / "zero2_pp" / "metrics.jsonl.rank0.memory.json").read_text())
    assert memory["optimizer_states"] == pytest.approx(2 * stage0 / 2, rel=0.02)


def test_plans_the_engine_cannot_shard_are_named(tmp_path):
    zero3 = ExecutionOptions(zero="zero3")
    piped = Plan((Stage(0, 3, (R(1, 8, 1),)), Stage(4, 7, (R(1, 8, 1),))))
    assert "one-stage plans" in unsupported_reason(zero3, JOB, piped)
    assert "one-stage plans" in unsupported_reason(ExecutionOptions(zero="hybrid"), JOB, piped)
    zero2 = ExecutionOptions(zero="zero2")
    assert unsupported_reason(zero2, JOB, piped) is None
    assert unsupported_reason(zero2, JOB, ZERO2_PP) is None
    v2 = ExecutionOptions(zero="zero2", virtual_stages=2)
    assert "interleaved" in unsupported_reason(v2, JOB_V2, INTERLEAVED)
    tied = tmp_path / "tied.json"
    tied.write_text(json.dumps({"model_type": "gpt2", "n_embd": 32, "n_layer": 6, "n_head": 2,
                                "n_positions": 64, "vocab_size": 256}))  # fmt: skip
    tied_job = Job.create(str(tied), 8, 32)
    assert tied_job.model.tie_word_embeddings
    assert "tied embedding" in unsupported_reason(zero2, tied_job, piped)
    assert unsupported_reason(zero2, tied_job, DP2) is None
    mixed_tp = Plan((Stage(0, 7, (R(1, 2, 2), R(2, 2, 2))),))
    assert "needs one TP degree" in unsupported_reason(zero3, JOB, mixed_tp)
    mixed_n = Plan((Stage(0, 7, (R(1, 2, 2), R(1, 4, 1))),))
    assert "needs the same count" in unsupported_reason(zero3, JOB, mixed_n)
    assert unsupported_reason(zero3, JOB, DP2) is None
    assert supports(zero3, JOB, DP2) and not supports(zero3, JOB, piped)
    hybrid = ExecutionOptions(zero="hybrid")
    assert "do not divide stage 0's 3 replicas" in unsupported_reason(hybrid, JOB, _three_t4())
    sp = ExecutionOptions(sequence_parallel=True)
    assert "tp > 1 in every replica" in unsupported_reason(sp, JOB, DP2)
    assert unsupported_reason(sp, JOB, SP_MIXED) is None


def _three_t4() -> Plan:
    return Plan(
        (
            Stage(
                0,
                7,
                (
                    Replica("T4", "local", 2, 2, 1),
                    Replica("T4", "local", 2, 2, 1),
                    Replica("T4", "local", 2, 4, 1),
                ),
            ),
        )
    )


def test_the_engine_refuses_an_unsupported_plan_before_starting():
    """A rank's ``TrainConfig`` refuses the combination, naming the fix, before any process
    group exists (and so does the file a launcher writes)."""
    bad = Plan((Stage(0, 7, (R(1, 2, 2), R(2, 2, 2))),))
    with pytest.raises(EngineError, match="^options: zero: zero3 .* use zero1 on this plan"):
        TrainConfig.for_job(job=JOB, plan=bad, steps=1, options=ExecutionOptions(zero="zero3"))
    good = TrainConfig.for_job(job=JOB, plan=DP2, steps=1, options=ExecutionOptions(zero="zero3"))
    data = {**good.to_dict(), "plan": bad.to_dict()}
    with pytest.raises(EngineError, match="^options: zero: zero3"):
        TrainConfig.from_dict(data)
