"""The original Sailor paper's planner scenarios (OPT-350M, global batch 1024, fp32), Sailor's
planner against the baselines, all scored by the same simulator.

Scenarios (GPU-availability traces and constraint values from ../shared/reference):
homogeneous A100-40 32 / 80 / 128 in one zone; heterogeneous A100-40 32 / 80 / 128 with V100-16
96 / 240 / 384; geo-distributed A100-40 32 / 80 / 128 in each of 5 zones across 2 regions;
512 GPUs (128 A100-40 + 128 V100-16 in each of 2 zones) for min $/iteration at >= 0.2 it/s and
for max throughput at <= 1.2 $/iteration. Profiles: the original artifacts (--sailor-root) when
present, else the built-in analytic catalog. Exits 1 if the planner is worse than a baseline.

    uv run python bench/planner_scenarios.py
"""

from __future__ import annotations

import sys
import time

from _planner_common import ae_constraint, fmt_row, simulator, trace_rows

from sailor_planner.planner import Planner
from sailor_planner.request import Constraints, SearchOptions
from sailor_planner.search.baselines import best_single_type, uniform_all
from sailor_sim import Inventory, Job

FALLBACK = {  # used only when the reference traces are absent
    "gpu_trace_scaled.csv": [{"A100-40@us-central1-a": n} for n in (32, 80, 128)],
    "gpu_trace_heterogeneous_imbalanced.csv": [
        {"A100-40@us-central1-a": a, "V100-16@us-central1-a": v}
        for a, v in ((32, 96), (80, 240), (128, 384))
    ],
    "gpu_trace_multizone.csv": [
        {
            f"A100-40@{z}": n
            for z in (
                "us-central1-a",
                "us-central1-b",
                "us-central1-c",
                "us-central1-f",
                "us-west1-b",
            )
        }
        for n in (32, 80, 128)
    ],
    "gpu_trace_2zones_2gpus.csv": [
        {
            f"{g}@{z}": 128
            for g in ("A100-40", "V100-16")
            for z in ("us-central1-a", "us-central1-b")
        }
    ],
}
WIDTHS = (26, 22, 8, 8, 5, 8, 60)


def scenarios():
    min_thr = ae_constraint("min_throughput_file.json") or 0.2
    max_budget = ae_constraint("max_budget_file.json") or 1.2
    for label, trace in (
        ("homogeneous", "gpu_trace_scaled.csv"),
        ("heterogeneous", "gpu_trace_heterogeneous_imbalanced.csv"),
        ("geo-distributed", "gpu_trace_multizone.csv"),
    ):
        for row in trace_rows(trace) or FALLBACK[trace]:
            yield f"{label} {sum(row.values())}", row, SearchOptions()
    row = (trace_rows("gpu_trace_2zones_2gpus.csv") or FALLBACK["gpu_trace_2zones_2gpus.csv"])[0]
    yield (
        f"512 min cost @>={min_thr} it/s",
        row,
        SearchOptions(objective="cost", constraints=Constraints(min_throughput=min_thr)),
    )
    yield (
        f"512 max thr @<={max_budget} $/it",
        row,
        SearchOptions(constraints=Constraints(max_cost_per_iteration=max_budget)),
    )


def _row(name, method, ranked, seconds):
    if ranked is None:
        return fmt_row((name, method, "-", "-", "-", f"{seconds:.2f}", "no feasible plan"), WIDTHS)
    e, p = ranked.estimate, ranked.plan
    return fmt_row(
        (
            name,
            method,
            f"{e.throughput_iters_per_s:.4f}",
            f"{e.cost_per_iteration_usd:.3f}",
            p.num_gpus,
            f"{seconds:.2f}",
            p.describe(),
        ),
        WIDTHS,
    )


def main() -> int:
    sim, source = simulator()
    job = Job.create("OPT-350M", 1024, 2048, "fp32")
    print(f"OPT-350M, global batch 1024, seq 2048, fp32; profiles: {source}")
    print(fmt_row(("scenario", "method", "iter/s", "$/iter", "GPUs", "search s", "plan"), WIDTHS))
    worse = []
    for name, row, options in scenarios():
        inventory = Inventory.parse([f"{k}={v}" for k, v in row.items()])
        start = time.perf_counter()
        ours = Planner(sim).plan(job, inventory, options)  # cold: no memo from earlier rows
        print(_row(name, "Sailor planner", ours.best, time.perf_counter() - start))
        for baseline in (best_single_type, uniform_all):
            res = baseline(sim, job, inventory, options)
            print(_row(name, res.name, res.best, res.search_time_s))
            if res.best is not None and _better(options, res.best.estimate, ours.best.estimate):
                worse.append(f"{name}: {res.name}")
        sys.stdout.flush()
    if worse:
        print("planner worse than a baseline in: " + "; ".join(worse), file=sys.stderr)
        return 1
    print("planner >= every baseline in every scenario")
    return 0


def _better(options, a, b) -> bool:
    """True when estimate a beats estimate b under the objective (beyond rounding)."""
    if options.objective == "cost":
        return a.cost_per_iteration_usd < b.cost_per_iteration_usd * (1 - 1e-9)
    return a.throughput_iters_per_s > b.throughput_iters_per_s * (1 + 1e-9)


if __name__ == "__main__":
    sys.exit(main())
