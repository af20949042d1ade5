"""The planner against exhaustive enumeration of its search space on instances small enough to
list (OPT-350M, global batch 16, sequence 1024, microbatch sizes 1/2/4), under both objectives
and with constraints. Exits 1 if the planner misses an optimum.

    uv run python bench/planner_optimality.py
"""

from __future__ import annotations

import sys
import time

from sailor_planner.errors import NoFeasiblePlanError
from sailor_planner.exhaustive import exhaustive_best
from sailor_planner.planner import Planner
from sailor_planner.request import Constraints, SearchOptions
from sailor_sim import Inventory, Job
from sailor_sim.simulator import Simulator

INVENTORIES = [
    ["A100-40@us-central1-a=2", "V100-16@us-central1-b=2"],
    ["V100-16@us-central1-a=3"],
    ["A100-40@us-central1-a=2", "V100-16@us-west1-b=1"],
    ["A100-40@us-central1-a=4"],
    ["V100-16@us-central1-a=2", "T4@us-central1-a=2"],
]
REQUESTS = [
    ("throughput", Constraints()),
    ("cost", Constraints()),
    ("cost", Constraints(min_throughput=0.5)),
    ("throughput", Constraints(max_cost_per_iteration=0.0017)),
]


def main() -> int:
    sim = Simulator()
    job = Job.create("OPT-350M", 16, 1024, "fp32")
    print(f"{'inventory':52} {'objective':30} {'plans':>6} {'enum s':>7} {'plan s':>7}  result")
    missed = 0
    for pools in INVENTORIES:
        inventory = Inventory.parse(pools)
        for objective, constraints in REQUESTS:
            options = SearchOptions(objective, constraints, microbatch_sizes=(1, 2, 4))
            t0 = time.perf_counter()
            best, scored = exhaustive_best(sim, job, inventory, options)
            t_enum = time.perf_counter() - t0
            t0 = time.perf_counter()
            try:
                got = Planner(sim).plan(job, inventory, options).best
            except NoFeasiblePlanError:
                got = None
            t_plan = time.perf_counter() - t0
            if best is None or got is None:
                verdict = "both infeasible" if best is None and got is None else "MISMATCH"
            else:
                k = (
                    "throughput_iters_per_s"
                    if objective == "throughput"
                    else "cost_per_iteration_usd"
                )
                a, b = getattr(got.estimate, k), getattr(best.estimate, k)
                verdict = "optimal" if abs(a - b) <= 1e-9 * abs(b) else f"MISSED {a:.6g} vs {b:.6g}"
            missed += not verdict.startswith(("optimal", "both"))
            label = objective + "".join(
                f" {n}={v}" for n, v in vars(constraints).items() if v is not None
            )
            print(
                f"{', '.join(pools):52} {label:30} {scored:6} {t_enum:7.2f} {t_plan:7.2f}  "
                f"{verdict}"
            )
    print(f"{missed} of {len(INVENTORIES) * len(REQUESTS)} instances not optimal")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
