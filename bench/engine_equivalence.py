"""Engine equivalence and speed: heterogeneous plans vs one process, per-step losses.

    uv run python bench/engine_equivalence.py [--steps 10] [--backend gloo|nccl] [--dtype fp32]

For each plan of ``sailor_runtime.engine.examples`` (the six of the test suite and the
interleaved 1F1B ones, ``INTERLEAVED``: pp2 with 1 and 2 virtual stages, a heterogeneous pp2
with 2; tiny-gpt and tiny-llama, global batch 8, sequence 32) prints the largest relative loss
difference from the single-process reference over all steps, the final loss, and the mean
iteration time and samples/s after the first step. With ``--backend nccl`` each rank takes one
CUDA device: only plans with at most ``torch.cuda.device_count()`` ranks run (NCCL refuses two
ranks on one GPU), and the reference runs on cuda:0.

Bar: every plan's per-step losses within ``LOSS_RTOL`` (relative) of the single-process
reference, the same tolerance as the equivalence tests (1e-5 in fp32, 1e-11 in fp64); every
step present. Exits 1 when a plan misses the bar, a run fails or no plan can run here.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import polars as pl
import torch

from sailor_runtime.engine import launch_many, reference_run
from sailor_runtime.engine.examples import INTERLEAVED, JOBS, PLANS, interleaved_job
from sailor_runtime.engine.parallel.topology import Topology

LOSS_RTOL = {"fp32": 1e-5, "fp64": 1e-11}
"""Largest relative per-step loss difference from one process that counts as equivalent."""


def cases() -> dict:
    """name -> (model key of JOBS, job, plan, schedule): the test suite's plans, then the
    interleaved ones (their job carries the virtual stages the engine runs)."""
    out = {n: (m, JOBS[m], plan, sched) for n, (m, plan, sched) in PLANS.items()}
    for name, (plan, virtual) in INTERLEAVED.items():
        out[name] = ("gpt", interleaved_job(virtual), plan, "1f1b")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    p.add_argument("--dtype", default="fp32", choices=["fp32", "fp64"])
    a = p.parse_args(argv)
    limit = torch.cuda.device_count() if a.backend == "nccl" else 64
    chosen = {n: c for n, c in cases().items() if Topology(c[2]).world_size <= limit}
    if not chosen:
        print(f"no plan fits on {limit} CUDA devices: nothing measured")
        return 1
    root = Path(tempfile.mkdtemp(prefix="sailor-bench-engine-"))
    runs = [
        {
            "job": job.to_dict(),
            "plan": plan.to_dict(),
            "options": {"virtual_stages": job.options.virtual_stages},
            "steps": a.steps,
            "schedule": sched,
            "dtype": a.dtype,
            "backend": a.backend,
            "metrics": str(root / f"{name}.jsonl"),
        }
        for name, (m, job, plan, sched) in chosen.items()
    ]
    if launch_many(runs, log_dir=root / "logs"):
        print((root / "logs" / "ranks.log").read_text()[-4000:])
        return 1
    device = "cuda" if a.backend == "nccl" else "cpu"
    refs = {
        m: reference_run(job, device, steps=a.steps, dtype=a.dtype)[0] for m, job in JOBS.items()
    }
    bar = LOSS_RTOL[a.dtype]
    print(
        f"backend {a.backend}, dtype {a.dtype}, {a.steps} steps, global batch 8, seq 32; "
        f"bar: max rel dloss <= {bar:.0e}"
    )
    print(
        f"{'plan':28} {'model':10} {'ranks':>5} {'max rel dloss':>13} {'final loss':>10} "
        f"{'iter s':>7} {'samples/s':>9}  result"
    )
    failed = False
    for name, (m, _, plan, _) in chosen.items():
        df = pl.read_ndjson(root / f"{name}.jsonl").sort("step")
        if df.height != a.steps:
            print(f"{name:28} {df.height}/{a.steps} steps recorded  MISSING")
            failed = True
            continue
        rel = max(abs(x - y) / y for x, y in zip(df["loss"], refs[m], strict=True))
        tail = df.filter(pl.col("step") > 1)
        ok = rel <= bar
        failed |= not ok
        print(
            f"{name:28} {JOBS[m].model.name:10} {Topology(plan).world_size:>5} {rel:>13.2e} "
            f"{df['loss'][-1]:>10.4f} {tail['iteration_time_s'].mean():>7.3f} "
            f"{tail['samples_per_s'].mean():>9.1f}  {'ok' if ok else 'MISSED'}"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
