"""Cross-package: the plans the planner emits (its CLI's JSON) train in the engine exactly like
one process (sailor-planner -> sailor-runtime engine, gloo, local processes)."""

from __future__ import annotations

import json
import subprocess
import sys

import polars as pl
import torch

from sailor_runtime.engine import launch_many, reference_run
from sailor_sim import Job, Plan

STEPS = 3


def _planner_plans(model: str, gpus: str, top: int) -> list[Plan]:
    cmd = [
        sys.executable,
        "-c",
        "from sailor_planner.cli import app; app()",
        "plan",
        "--model",
        model,
        "--gbs",
        "8",
        "--seq-len",
        "32",
        "--gpus",
        gpus,
        "--top",
        str(top),
        "--json",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout
    return [Plan.from_dict(p["plan"]) for p in json.loads(out)["plans"]]


def test_planner_plans_train_like_one_process(tmp_path):
    job = Job.create("tiny-llama", 8, 32)
    plans = _planner_plans("tiny-llama", "CPU@local=3", top=3)
    assert plans, "the planner returned no plan"
    runs = [
        {
            "job": job.to_dict(),
            "plan": p.to_dict(),
            "steps": STEPS,
            "metrics": str(tmp_path / f"plan{i}.jsonl"),
        }
        for i, p in enumerate(plans)
    ]
    status = launch_many(runs, log_dir=tmp_path / "logs")
    assert status == 0, (tmp_path / "logs" / "ranks.log").read_text()[-4000:]
    ref, _ = reference_run(job, steps=STEPS)
    for i, plan in enumerate(plans):
        got = pl.read_ndjson(tmp_path / f"plan{i}.jsonl").sort("step")["loss"].to_list()
        torch.testing.assert_close(
            torch.tensor(got, dtype=torch.float64),
            torch.tensor(ref, dtype=torch.float64),
            rtol=1e-5,
            atol=0,
            msg=plan.describe(),
        )
