"""Execution options (precision, recompute, attention kernel, ZeRO-1, gradient accumulation)
against a single process and against the same plan without the option (gloo, local processes).

One heterogeneous plan for all: tiny-llama (RMSNorm, RoPE, SwiGLU, GQA), two pipeline stages,
each with two replicas of different TP degree (1 and 2) and microbatch size, 6 ranks. All runs
share one launch of forked rank processes (``launch_many``).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
import torch

from sailor_runtime.engine import OptionsError, launch_many, reference_run
from sailor_runtime.engine.checkpoints import checkpoint as ckpt
from sailor_runtime.engine.examples import JOBS, R
from sailor_runtime.engine.options import check_run, options_from_dict
from sailor_sim import ExecutionOptions, RunSpec, SailorError
from sailor_sim.spec.plan import Plan, Stage

STEPS = 8
JOB = JOBS["llama"]
PLAN = Plan((Stage(0, 3, (R(1, 2, 2), R(2, 4, 1))), Stage(4, 7, (R(2, 2, 2), R(1, 4, 1)))))
ONE_BIG = Plan((Stage(0, 7, (R(1, 8, 1),)),))
ACCUMULATE = Plan((Stage(0, 7, (R(1, 1, 8),)),))

RUNS: dict[str, tuple[Plan, dict, int]] = {
    "base": (PLAN, {}, STEPS),
    "recompute_full": (PLAN, {"recompute": "full"}, STEPS),
    "recompute_selective": (PLAN, {"recompute": "selective"}, STEPS),
    "zero1": (PLAN, {"zero": "zero1"}, STEPS),
    "math_attention": (PLAN, {"flash_attention": False}, STEPS),
    "bf16": (PLAN, {"precision": "bf16"}, STEPS),
    "fp16": (PLAN, {"precision": "fp16"}, STEPS),
    "one_big": (ONE_BIG, {}, STEPS),
    "accumulate": (ACCUMULATE, {}, STEPS),
    # ZeRO-1 saves at step 4 and resumes from its own sharded states
    "zero1_first": (PLAN, {"zero": "zero1", "recompute": "full", "precision": "bf16"}, 4),
    "zero1_resumed": (PLAN, {"zero": "zero1", "recompute": "full", "precision": "bf16"}, STEPS),
    "bf16_all": (PLAN, {"recompute": "full", "precision": "bf16"}, STEPS),
    # torch.optim.AdamW(fused=True): the CUDA path, here on CPU; saves at 4, resumes
    "fused": (PLAN, {}, STEPS),
    "fused_first": (PLAN, {}, 4),
    "fused_resumed": (PLAN, {}, STEPS),
    # ZeRO-1 on the CUDA path: the owners' units in torch's fused kernel; saves at 4, resumes
    "zero1_fused_first": (PLAN, {"zero": "zero1"}, 4),
    "zero1_fused_resumed": (PLAN, {"zero": "zero1"}, STEPS),
}
FUSED = {"fused", "fused_first", "fused_resumed", "zero1_fused_first", "zero1_fused_resumed"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("options")
    spec = []
    for name, (plan, options, steps) in RUNS.items():
        shared = {
            "zero1_first": "zero1_resume",
            "zero1_resumed": "zero1_resume",
            "fused_first": "fused_resume",
            "fused_resumed": "fused_resume",
            "zero1_fused_first": "zero1_fused_resume",
            "zero1_fused_resumed": "zero1_fused_resume",
        }
        ckpt_dir = root / shared.get(name, name) / "ckpt"
        (root / name).mkdir(parents=True, exist_ok=True)
        spec.append(
            {
                "job": JOB.to_dict(),
                "plan": plan.to_dict(),
                "steps": steps,
                "checkpoint_dir": str(ckpt_dir),
                "checkpoint_every": 4,
                "precision": options.get("precision"),
                "options": {k: v for k, v in options.items() if k != "precision"},
                "metrics": str(root / name / "metrics.jsonl"),
                "optimizer_impl": "torch-fused" if name in FUSED else "sailor",
            }
        )
    status = launch_many(spec, log_dir=root / "logs")
    if status:
        pytest.fail(f"ranks failed:\n{(root / 'logs' / 'ranks.log').read_text()[-5000:]}")
    return root


@pytest.fixture(scope="module")
def reference():
    return {
        "fp32": reference_run(JOB, steps=STEPS),
        "math": reference_run(JOB, steps=STEPS, options=ExecutionOptions(flash_attention=False)),
        "bf16": reference_run(JOB, steps=STEPS, precision="bf16"),
    }


def _losses(root: Path, name: str) -> torch.Tensor:
    frame = pl.read_ndjson(root / name / "metrics.jsonl").sort("step")
    return torch.tensor(frame["loss"].to_list(), dtype=torch.float64)


def _weights(root: Path, name: str) -> dict[str, torch.Tensor]:
    path, _ = ckpt.latest(root / name / "ckpt")
    return {k: t for k, t in ckpt.read_full(path).items() if "/opt_step/" not in k}


def _close(got, want, rtol):
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=rtol, atol=0)


@pytest.mark.parametrize("name", ["recompute_full", "recompute_selective", "zero1"])
def test_exact_options_change_nothing(runs, name):
    """Recomputation runs the same forward again (RNG and autocast state restored); ZeRO-1 runs
    the same elementwise AdamW on each owner's units: losses, weights and AdamW states are the
    same bits as the plan without the option."""
    assert torch.equal(_losses(runs, name), _losses(runs, "base"))
    base, got = _weights(runs, "base"), _weights(runs, name)
    assert base.keys() == got.keys()
    for key, t in base.items():
        assert torch.equal(got[key], t), key


def test_base_and_options_match_single_process(runs, reference):
    _close(_losses(runs, "base"), reference["fp32"][0], rtol=1e-5)


def test_sdpa_matches_math_attention(runs, reference):
    """SDPA against the explicit softmax(QK^T/sqrt(d))V, both fp32: the same function, in a
    different summation order (measured: < 1e-6 relative on the losses)."""
    _close(_losses(runs, "math_attention"), reference["math"][0], rtol=1e-5)
    _close(_losses(runs, "math_attention"), reference["fp32"][0], rtol=1e-5)


def test_gradient_accumulation_equals_one_big_batch(runs, reference):
    """8 microbatches of 1 accumulated in .grad == one microbatch of 8 == one process."""
    _close(_losses(runs, "accumulate"), reference["fp32"][0], rtol=1e-5)
    _close(_losses(runs, "accumulate"), _losses(runs, "one_big").tolist(), rtol=1e-5)


def test_bf16_mixed_precision(runs, reference):
    """bf16 autocast with fp32 master weights: against one process under the same autocast
    (per-microbatch matmuls round differently from the whole batch's: stated bar 2e-3
    relative), and against fp32 (bf16 rounding of every matmul: bar 2e-2). Master weights are
    fp32 in the checkpoint."""
    got = _losses(runs, "bf16")
    _close(got, reference["bf16"][0], rtol=2e-3)
    _close(got, reference["fp32"][0], rtol=2e-2)
    assert all(t.dtype == torch.float32 for t in _weights(runs, "bf16").values())


def test_fp16_mixed_precision_with_loss_scaling(runs, reference):
    _close(_losses(runs, "fp16"), reference["fp32"][0], rtol=2e-2)


def test_zero1_resumes_from_its_sharded_states(runs):
    """Saved at step 4 (states gathered from their owners), resumed into ZeRO-1 again: the same
    losses as the uninterrupted run with the same options, bit for bit."""
    first, second = _losses(runs, "zero1_first"), _losses(runs, "zero1_resumed")
    assert len(first) == 4 and len(second) == STEPS - 4
    assert torch.equal(torch.cat([first, second]), _losses(runs, "bf16_all"))


def test_fused_torch_adamw_the_cuda_path(runs, reference):
    """torch.optim.AdamW(fused=True), what CUDA ranks run: the same update in one kernel, in
    another arithmetic order than ours (measured: < 1e-6 relative on the losses), and a
    checkpoint of its states resumes bit for bit."""
    _close(_losses(runs, "fused"), _losses(runs, "base").tolist(), rtol=1e-5)
    _close(_losses(runs, "fused"), reference["fp32"][0], rtol=1e-5)
    resumed = torch.cat([_losses(runs, "fused_first"), _losses(runs, "fused_resumed")])
    assert torch.equal(resumed, _losses(runs, "fused"))


def test_zero1_on_the_fused_kernel_equals_fused_without_zero(runs):
    """ZeRO-1 with torch's fused AdamW (what CUDA ranks run; was our per-tensor Python loop):
    the owners run the same kernel on their units, so the losses equal the fused run without
    ZeRO bit for bit, through a save at step 4 and a resume of the sharded states."""
    got = torch.cat([_losses(runs, "zero1_fused_first"), _losses(runs, "zero1_fused_resumed")])
    assert torch.equal(got, _losses(runs, "fused"))


def test_unsupported_options_are_refused_with_the_fix():
    """The options are the simulator's (its values checked there, naming the field); what the
    engine does not run of them is refused by ``check_run``, naming the field and the fix."""
    with pytest.raises(SailorError, match="options.zero: 'zero4' is not one of"):
        ExecutionOptions(zero="zero4")
    with pytest.raises(SailorError, match="options.sequence_parallel: must be true or false"):
        ExecutionOptions(sequence_parallel="yes")
    with pytest.raises(OptionsError, match="recompute: selective_op is simulated, not run"):
        check_run(RunSpec(options=ExecutionOptions(recompute="selective_op")))
    with pytest.raises(OptionsError, match="precision: fp8 is not run by the engine; use one"):
        check_run(RunSpec(precision="fp8"))
    with pytest.raises(OptionsError, match="fused_loss: the engine's cross-entropy is the fused"):
        check_run(RunSpec(options=ExecutionOptions(fused_loss=False)))
    with pytest.raises(OptionsError, match="^options: unknown options"):
        options_from_dict({"zero_stage": 1})  # the old name: zero="zero1" now


def test_a_runspec_s_options_are_the_engine_s():
    check_run(RunSpec(precision="bf16", options=ExecutionOptions(virtual_stages=3)))
    with pytest.raises(OptionsError, match="fp8: delayed is simulated"):
        check_run(RunSpec(options=ExecutionOptions(fp8="delayed")))
