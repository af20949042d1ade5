"""Equivalence: heterogeneous plans train exactly like one process (gloo, local processes).

All runs share one launch of 8 forked rank processes (``launch_many``): starting torch costs seconds
per process on a small machine, a 10-step run of a tiny model a fraction of that.
Dropout is 0 in the tiny models, so runs are deterministic across plans.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
import torch

from sailor_runtime.engine import launch_many, reference_run
from sailor_runtime.engine.checkpoints import checkpoint as ckpt
from sailor_runtime.engine.examples import (
    INTERLEAVED,
    JOBS,
    PLANS,
    RESHARD_A,
    RESHARD_B,
    interleaved_job,
)

STEPS = 10
GOLDEN = Path(__file__).parent / "golden" / "tiny_gpt_gbs8_seq32_losses.json"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("engine")
    spec = []

    def add(name, model, plan, steps, schedule="1f1b", dtype="fp32", ckpt_dir=None, virtual=1):
        job = JOBS[model] if virtual == 1 else interleaved_job(virtual)
        spec.append(
            {
                "job": job.to_dict(),
                "options": {"virtual_stages": virtual},
                "plan": plan.to_dict(),
                "steps": steps,
                "checkpoint_dir": str(ckpt_dir or root / name / "ckpt"),
                "schedule": schedule,
                "dtype": dtype,
                "metrics": str(root / name / "metrics.jsonl"),
            }
        )
        (root / name).mkdir(parents=True, exist_ok=True)

    for name, (model, plan, schedule) in PLANS.items():
        add(name, model, plan, STEPS, schedule)
    add("fp64_pp3_dp2_mixed_tp", "gpt", PLANS["pp3_dp2_mixed_tp"][1], STEPS, dtype="fp64")
    add("reshard_A", "gpt", RESHARD_A, 5, ckpt_dir=root / "reshard")
    add("reshard_B", "gpt", RESHARD_B, STEPS, ckpt_dir=root / "reshard")
    for name, (plan, virtual) in INTERLEAVED.items():
        add(name, "gpt", plan, STEPS, virtual=virtual)
    # written with 2 chunks per rank on 2 stages, resumed on 3 stages without interleaving
    add("resume_v2", "gpt", INTERLEAVED["pp2_v2"][0], 5, ckpt_dir=root / "revirtual", virtual=2)
    add("resume_v1", "gpt", RESHARD_B, STEPS, ckpt_dir=root / "revirtual")
    status = launch_many(spec, log_dir=root / "logs")
    if status:
        pytest.fail(f"ranks failed:\n{(root / 'logs' / 'ranks.log').read_text()[-5000:]}")
    return root


@pytest.fixture(scope="module")
def reference():
    """Single-process baselines: fp32 per model, and fp64 for tiny-gpt."""
    out = {m: reference_run(job, steps=STEPS) for m, job in JOBS.items()}
    out["gpt-fp64"] = reference_run(JOBS["gpt"], steps=STEPS, dtype="fp64")
    return out


def _losses(path: Path) -> list[float]:
    return pl.read_ndjson(path).sort("step")["loss"].to_list()


def _assert_losses(got: list[float], want: list[float], rtol: float) -> None:
    torch.testing.assert_close(
        torch.tensor(got, dtype=torch.float64),
        torch.tensor(want, dtype=torch.float64),
        rtol=rtol,
        atol=0,
    )


def _assert_weights_match(ckpt_root: Path, ref_model, rel_tol: float, atol: float) -> None:
    """The final checkpoint (full tensors by layer id) against the reference model: relative
    error norm over the whole model, and every element within ``atol``."""
    path, manifest = ckpt.latest(ckpt_root)
    assert manifest["step"] == STEPS
    diff = norm = 0.0
    layers = ckpt.read_layers(path)
    for lid in ref_model.layer_ids:
        saved = layers[lid]["params"]
        for pname, p in ref_model.layer_params(lid).items():
            want = p.detach().double()
            diff += float((saved[pname].double() - want).pow(2).sum())
            norm += float(want.pow(2).sum())
            torch.testing.assert_close(saved[pname].double(), want, rtol=0, atol=atol, msg=pname)
    assert (diff / norm) ** 0.5 <= rel_tol


@pytest.mark.parametrize("name", list(PLANS))
def test_plan_matches_single_process(name, runs, reference):
    """fp32 (the job's dtype). Weights: AdamW normalizes each element's update, so an element
    whose gradient is almost pure rounding noise (e.g. the key bias, on which the loss does not
    depend) can differ by a fraction of one step (lr 1e-3) from the reference."""
    model = PLANS[name][0]
    ref_losses, ref_model = reference[model]
    metrics = pl.read_ndjson(runs / name / "metrics.jsonl")
    assert metrics["step"].to_list() == list(range(1, STEPS + 1))
    assert metrics["consumed_samples"].to_list()[-1] == STEPS * 8
    assert (metrics["peak_memory_bytes"] > 0).all() and (metrics["samples_per_s"] > 0).all()
    _assert_losses(metrics["loss"].to_list(), ref_losses, rtol=1e-5)
    _assert_weights_match(runs / name / "ckpt", ref_model, rel_tol=1e-5, atol=1e-4)


def test_fp64_plan_is_exact_to_rounding(runs, reference):
    """In fp64 the only difference left is summation order: losses and weights agree to ~1e-12."""
    ref_losses, ref_model = reference["gpt-fp64"]
    _assert_losses(_losses(runs / "fp64_pp3_dp2_mixed_tp" / "metrics.jsonl"), ref_losses, 1e-11)
    _assert_weights_match(runs / "fp64_pp3_dp2_mixed_tp" / "ckpt", ref_model, 1e-10, 1e-10)


def test_reshard_continues_exactly(runs, reference):
    first = _losses(runs / "reshard_A" / "metrics.jsonl")
    second = pl.read_ndjson(runs / "reshard_B" / "metrics.jsonl")
    assert second["step"].to_list() == list(range(6, STEPS + 1))
    _assert_losses(first + second["loss"].to_list(), reference["gpt"][0], rtol=1e-5)
    _assert_weights_match(runs / "reshard", reference["gpt"][1], rel_tol=1e-5, atol=1e-4)


def test_golden_single_process_losses(reference):
    golden = json.loads(GOLDEN.read_text())
    assert golden["model"] == "tiny-gpt" and golden["steps"] == STEPS
    _assert_losses(reference["gpt"][0], golden["losses"], rtol=1e-4)
    assert golden["losses"][-1] < golden["losses"][0] - 0.5  # it learns


def _assert_same_checkpoints(a: Path, b: Path, atol: float) -> None:
    """The final checkpoints of two runs hold the same layers with the same values."""
    one, two = (ckpt.read_layers(ckpt.latest(root)[0]) for root in (a, b))
    assert sorted(one) == sorted(two)
    for lid, kinds in one.items():
        for pname, t in kinds["params"].items():
            torch.testing.assert_close(t, two[lid]["params"][pname], rtol=0, atol=atol, msg=pname)


@pytest.mark.parametrize("name", ["pp2_v2", "pp2_v2_hetero"])
def test_interleaved_matches_single_process_and_plain_1f1b(name, runs, reference):
    """Interleaved 1F1B (2 chunks per rank, layers dealt round-robin) trains as one process
    and as the same plan without interleaving: losses step by step, final weights. The first
    rank holds layer ids 0-2 (chunk 0) and 5 (chunk 1) in each of the three interleaved runs."""
    log = (runs / "logs" / "ranks.log").read_text()
    first = "replica=0, tp_rank=0) built, layer ids [0, 1, 2, 5] ("
    assert log.count(first) == 3 and log.count("interleaved 1F1B x2)") == 2 + 6 + 2  # ranks
    ref_losses, ref_model = reference["gpt"]
    got = _losses(runs / name / "metrics.jsonl")
    _assert_losses(got, ref_losses, rtol=1e-5)
    _assert_weights_match(runs / name / "ckpt", ref_model, rel_tol=1e-5, atol=1e-4)
    _assert_losses(got, _losses(runs / "pp2_v1" / "metrics.jsonl"), rtol=1e-6)
    _assert_same_checkpoints(runs / name / "ckpt", runs / "pp2_v1" / "ckpt", atol=1e-5)


def test_interleaved_checkpoint_resumes_without_interleaving(runs, reference):
    """Saved by layer id, a checkpoint of 2 chunks per rank on 2 stages resumes on 3 stages
    with one chunk each (other TP degrees too) and continues the single-process trajectory."""
    path, manifest = ckpt.latest(runs / "revirtual")
    assert manifest["step"] == STEPS and manifest["options"]["virtual_stages"] == 1
    first = _losses(runs / "resume_v2" / "metrics.jsonl")
    second = pl.read_ndjson(runs / "resume_v1" / "metrics.jsonl")
    assert len(first) == 5 and second["step"].to_list() == list(range(6, STEPS + 1))
    _assert_losses(first + second["loss"].to_list(), reference["gpt"][0], rtol=1e-5)
    _assert_weights_match(runs / "revirtual", reference["gpt"][1], rel_tol=1e-5, atol=1e-4)
