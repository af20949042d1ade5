"""Simulator accuracy on the 15 real GH200 runs of the original Sailor (OPT-350, fp32, Adam).

Reads ``<reference>/sailor-artifacts`` (env SAILOR_REFERENCE, else ../shared/reference next to
the repository), simulates every ``validation/clariden/OPT-350/**/plan_config_*.json`` with the
imported Sailor profiles (denoised across microbatch sizes, ``sailor_sim.profile_denoise``;
``--raw`` uses them as imported) and network fits, and prints predicted vs measured iteration
time and peak memory (``max_mem``: nvidia-smi, CUDA context and allocator cache included) per
point and in summary, next to the original Sailor simulator's published error. Exits 1 when a
target is missed (mean |error| <= 5% for time and memory, no point worse than 10%), 0 when the
reference data is absent (with a note).
"""

from __future__ import annotations

import glob
import os
import sys
from pathlib import Path

from sailor_sim import Job, Simulator, read_sailor_plan

TARGET_MEAN, TARGET_MAX = 0.05, 0.10
SAILOR_ORIGINAL = {"time_mean": 0.089, "time_max": 0.16, "mem_mean": 0.059, "mem_max": 0.09}


def reference_root() -> Path:
    env = os.environ.get("SAILOR_REFERENCE")
    base = Path(env) if env else Path(__file__).resolve().parents[1].parent / "shared" / "reference"
    return base / "sailor-artifacts"


def main(argv: list[str] | None = None) -> int:
    raw = "--raw" in (sys.argv[1:] if argv is None else argv)
    root = reference_root()
    pattern = str(
        root / "sailor/Planner/simulations/validation/clariden/OPT-350/**/plan_config_*.json"
    )
    files = sorted(glob.glob(pattern, recursive=True))
    if not files:
        print(f"sim_validation: no reference data under {root}; skipped")
        return 0
    sim = Simulator.from_sailor_root(root, denoise=not raw)
    print(
        "| point | PP | DP | mbs | M | time pred s | time real s | err "
        "| mem pred GB | mem real GB | err |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    t_err, m_err = [], []
    for f in files:
        rec = read_sailor_plan(f)
        job = Job.create("OPT-350", rec.global_batch_size, 2048, "fp32", "adam")
        e = sim.estimate(job, rec.plan)
        et = (e.iteration_time_s - rec.measured_iteration_s) / rec.measured_iteration_s
        em = (e.peak_memory_bytes - rec.measured_peak_memory_bytes) / rec.measured_peak_memory_bytes
        t_err.append(abs(et))
        m_err.append(abs(em))
        r0 = rec.plan.stages[0].replicas[0]
        print(
            f"| {Path(f).stem.removeprefix('plan_config_')} | {rec.plan.num_stages} | "
            f"{rec.plan.num_pipelines} | {r0.microbatch_size} | {r0.num_microbatches} | "
            f"{e.iteration_time_s:.3f} | {rec.measured_iteration_s:.3f} | {et:+.1%} | "
            f"{e.peak_memory_bytes / 1e9:.2f} | "
            f"{rec.measured_peak_memory_bytes / 1e9:.2f} | {em:+.1%} |"
        )
    n = len(files)
    summary = {
        "time_mean": sum(t_err) / n,
        "time_max": max(t_err),
        "mem_mean": sum(m_err) / n,
        "mem_max": max(m_err),
    }
    print()
    print("| metric | this simulator | original Sailor | target |")
    print("|---|---|---|---|")
    for key, label in (
        ("time_mean", "time mean |err|"),
        ("time_max", "time max |err|"),
        ("mem_mean", "memory mean |err|"),
        ("mem_max", "memory max |err|"),
    ):
        target = TARGET_MEAN if key.endswith("mean") else TARGET_MAX
        print(f"| {label} | {summary[key]:.1%} | {SAILOR_ORIGINAL[key]:.1%} | <= {target:.0%} |")
    missed = [
        k for k, v in summary.items() if v > (TARGET_MEAN if k.endswith("mean") else TARGET_MAX)
    ]
    if missed:
        print(f"sim_validation: targets missed: {', '.join(missed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
