"""kill -9 during an asynchronous checkpoint save: the previous checkpoint stays the latest
valid one, and the worker CLI resumes from it to the same losses as an uninterrupted run."""

from __future__ import annotations

import time

import polars as pl
import torch

from sailor_runtime.engine import launch_local, reference_run, start_local
from sailor_runtime.engine.checkpoints import checkpoint as ckpt
from sailor_sim import Job, Plan, Replica, Stage

JOB = Job.create("tiny-gpt", 8, 32)
PLAN = Plan(
    (
        Stage(0, 3, (Replica("CPU", "local", 1, 2, 4),)),
        Stage(4, 7, (Replica("CPU", "local", 1, 2, 4),)),
    )
)


def _wait_for(cond, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_kill_during_async_save_keeps_previous_checkpoint(tmp_path):
    root, metrics = tmp_path / "ckpt", tmp_path / "metrics.jsonl"
    run = start_local(
        JOB,
        PLAN,
        steps=6,
        checkpoint_dir=root,
        checkpoint_every=3,
        metrics_path=metrics,
        env={ckpt.DELAY_ENV: "1.5"},
        log_dir=tmp_path,
    )
    partial = root / "step_00000006.tmp"
    try:
        _wait_for(lambda: (root / "step_00000003" / "manifest.json").exists(), 240, "step 3")
        _wait_for(
            lambda: partial.is_dir() and (partial / ".metadata").exists(),
            120,
            "the step-6 save to be in flight",
        )
        run.kill(9)
    finally:
        run.kill(9)
        for p in run.procs:
            p.wait()
    assert not (root / "step_00000006").exists()
    assert ckpt.read_manifest(partial) is None
    path, manifest = ckpt.latest(root)
    assert path.name == "step_00000003" and manifest["consumed_samples"] == 24

    # Resume through the worker CLI.
    codes = launch_local(
        JOB, PLAN, steps=6, checkpoint_dir=root, metrics_path=metrics, log_dir=tmp_path
    )
    assert codes == [0, 0], (tmp_path / "rank0.log").read_text()[-3000:]
    assert not partial.exists()
    assert ckpt.latest(root)[1]["step"] == 6
    df = pl.read_ndjson(metrics)
    assert {
        "step",
        "loss",
        "iteration_time_s",
        "samples_per_s",
        "consumed_samples",
        "peak_memory_bytes",
    } <= set(df.columns)
    resumed = df.filter(pl.col("step") >= 4).unique("step", keep="last").sort("step")
    assert resumed["consumed_samples"].to_list() == [32, 40, 48]
    ref, _ = reference_run(JOB, steps=6)
    torch.testing.assert_close(
        torch.tensor(resumed["loss"].to_list(), dtype=torch.float64),
        torch.tensor(ref[3:], dtype=torch.float64),
        rtol=1e-5,
        atol=0,
    )
