"""The planner against exhaustive enumeration of its search space, with the production search
settings, on instances up to the largest the enumeration lists in a few minutes.

Instances:
- small: OPT-350M, global batch 16, sequence 1024, microbatch sizes 1/2/4, 3-4 GPUs (built-in
  analytic profiles, the job's options);
- sailor: the original Sailor profiles and network fits (read from ../shared/reference, never
  copied), OPT-350M fp32 seq 2048 at global batch 4, 32-36 GPUs of 2-3 types (A100-40,
  V100-16, A100-80), each of the first two in 2 zones (us-central1-a/b: the fits give them
  different links), pipelines up to 2 stages, with the execution-option search on as the CLI
  runs it; the reference enumerates every plan (pipelines inside one zone, one TP degree per
  pipeline: a sub-space of the planner's) under each of the 24 option sets the planner
  searches (recompute x ZeRO x SP);
- large: tiny-gpt (8 layer ids), global batch 4, sequence 128, 32-40 GPUs of 2-3 types in 2
  zones, pipelines up to 2 stages (built-in profiles, the job's options).

The planner runs as the CLI and the server run it: it has no exact mode for small inventories
(the one it had below 8 GPUs hid two misses of its search, e.g. tp2|tp1 on 3 V100s).

Each inventory is enumerated once (every plan scored by the simulator) and answers four
requests: max throughput; min $/iteration; min $/iteration at >= half the best throughput;
max throughput at <= 1.2x the cheapest $/iteration (constraints derived from the enumeration so
they bite). Gap = how much worse the planner's best is than the optimum (throughput: 1 - got /
best; cost: got / best - 1; negative: the planner found better outside the reference's space).
Prints every answer and the gap distribution. Bar: no gap above 1 % (both infeasible counts as
optimal). Exits 1 on a miss, or when the Sailor artifacts are missing.

    uv run python bench/planner_optimality.py [--quick]   (quick: small + the first sailor)
"""

from __future__ import annotations

import dataclasses
import itertools
import statistics
import sys
import time
from dataclasses import dataclass

from _planner_common import sailor_root

from sailor_planner.errors import NoFeasiblePlanError
from sailor_planner.planner import Planner
from sailor_planner.request import Constraints, SearchOptions
from sailor_planner.search.execution import RECOMPUTE, ZERO_ONE_STAGE
from sailor_planner.search.exhaustive import enumerate_plans
from sailor_sim import Inventory, Job, SailorSimError
from sailor_sim.simulate.simulator import Simulator


@dataclass(frozen=True)
class Instance:
    name: str
    job: Job
    pools: tuple[str, ...]
    max_depth: int = 16
    microbatch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16)
    sailor: bool = False
    """Original Sailor profiles and network fits, and the execution-option search on (the
    reference then enumerates every plan under every option set)."""


MAX_GAP = 0.01
"""Bar: no answer more than 1 % worse than the reference optimum."""
OPT = Job.create("OPT-350M", 16, 1024, "fp32")
TINY = Job.create("tiny-gpt", 4, 128, "fp32")


def small(name: str, *pools: str) -> Instance:
    return Instance(name, OPT, pools, 16, (1, 2, 4))


SMALL = [
    small("small-1", "A100-40@us-central1-a=2", "V100-16@us-central1-b=2"),
    small("small-2", "V100-16@us-central1-a=3"),
    small("small-3", "A100-40@us-central1-a=2", "V100-16@us-west1-b=1"),
    small("small-4", "A100-40@us-central1-a=4"),
    small("small-5", "V100-16@us-central1-a=2", "T4@us-central1-a=2"),
]
SAILOR_OPT = Job.create("OPT-350M", 4, 2048, "fp32")


def sailor(name: str, *pools: str) -> Instance:
    """OPT-350M as the Sailor paper ran it, at global batch 4 (so the enumeration ends in
    minutes), pipelines up to 2 stages, microbatch 1/2/4, each type in two zones."""
    return Instance(name, SAILOR_OPT, pools, 2, (1, 2, 4), sailor=True)


SAILOR = [
    sailor("sailor 32, 2 types", "A100-40@us-central1-a=8", "A100-40@us-central1-b=8",
           "V100-16@us-central1-a=8", "V100-16@us-central1-b=8"),
    sailor("sailor 36, 3 types", "A100-40@us-central1-a=8", "A100-40@us-central1-b=8",
           "V100-16@us-central1-a=8", "V100-16@us-central1-b=8", "A100-80@us-central1-a=4"),
]  # fmt: skip
"""The reference for these enumerates pipelines inside one zone with one TP degree for all
their stages (``enumerate_plans(uniform_tp=True)``): a sub-space of the planner's, so a
negative gap is the planner finding better outside it."""
LARGE = [
    Instance("32 GPUs, 2 types", TINY, ("A100-40@us-central1-a=16", "V100-16@us-central1-b=16"), 2),
    Instance("32 GPUs, 3 types", TINY,
             ("A100-40@us-central1-a=12", "V100-16@us-central1-b=12", "T4@us-central1-a=8"), 2),
    Instance("40 GPUs, 3 types", TINY,
             ("A100-40@us-central1-a=8", "V100-16@us-central1-b=16", "T4@us-central1-b=16"), 2),
]  # fmt: skip


@dataclass(frozen=True)
class Scored:
    throughput: float
    cost_per_iteration: float
    cost_per_hour: float


def option_sets(inst: Instance) -> list:
    """The job's options, and with the option search on every combination it searches."""
    if not inst.sailor:
        return [inst.job.options]
    return [
        dataclasses.replace(inst.job.options, recompute=r, zero=z, sequence_parallel=sp)
        for r, z, sp in itertools.product(RECOMPUTE, ZERO_ONE_STAGE, (False, True))
    ]


def enumerate_scores(sim, inst: Instance, inventory: Inventory) -> list[Scored]:
    """Every plan of the space that fits, under every option set, with its figures."""
    options = SearchOptions(
        max_pipeline_depth=inst.max_depth, microbatch_sizes=inst.microbatch_sizes
    )
    plans = list(enumerate_plans(inst.job, inventory, options, uniform_tp=inst.sailor))
    out = []
    for chosen, plan in itertools.product(option_sets(inst), plans):
        try:
            est = sim.estimate(dataclasses.replace(inst.job, options=chosen), plan)
        except SailorSimError:  # e.g. ZeRO-3 with 2 stages, SP with tp 1
            continue
        if est.fits:
            out.append(
                Scored(
                    est.throughput_iters_per_s,
                    est.cost_per_iteration_usd,
                    est.cost_per_hour_usd,
                )
            )
    return out


def requests(scores: list[Scored]) -> list[tuple[str, Constraints]]:
    out = [("throughput", Constraints()), ("cost", Constraints())]
    if scores:
        best = max(s.throughput for s in scores)
        cheapest = min(s.cost_per_iteration for s in scores)
        out += [
            ("cost", Constraints(min_throughput=float(f"{best / 2:.4g}"))),
            ("throughput", Constraints(max_cost_per_iteration=float(f"{cheapest * 1.2:.4g}"))),
        ]
    return out


def optimum(scores: list[Scored], objective: str, constraints: Constraints) -> float | None:
    ok = [
        s for s in scores if constraints.admits(s.throughput, s.cost_per_iteration, s.cost_per_hour)
    ]
    if not ok:
        return None
    if objective == "cost":
        return min(s.cost_per_iteration for s in ok)
    return max(s.throughput for s in ok)


def gap(objective: str, got: float | None, best: float | None) -> float:
    """0 = optimal; inf = the planner found nothing where a plan exists (or the reverse)."""
    if best is None or got is None:
        return 0.0 if best is got else float("inf")
    g = 1 - got / best if objective == "throughput" else got / best - 1
    return 0.0 if abs(g) <= 1e-9 else g


def missed(g: float) -> bool:
    return g > MAX_GAP


def planner_value(sim, inst: Instance, inventory, objective, constraints) -> float | None:
    options = SearchOptions(
        objective,
        constraints,
        max_pipeline_depth=inst.max_depth,
        microbatch_sizes=inst.microbatch_sizes,
        search_execution_options=inst.sailor,
    )
    try:
        best = Planner(sim).plan(inst.job, inventory, options).best
    except NoFeasiblePlanError:
        return None
    est = best.estimate
    return est.cost_per_iteration_usd if objective == "cost" else est.throughput_iters_per_s


def label(objective: str, c: Constraints) -> str:
    return objective + "".join(f" {n}={v:.4g}" for n, v in vars(c).items() if v is not None)


def run_instance(sim, inst: Instance, gaps: list[float]) -> None:
    inventory = Inventory.parse(list(inst.pools))
    t0 = time.perf_counter()
    scores = enumerate_scores(sim, inst, inventory)
    t_enum = time.perf_counter() - t0
    for objective, constraints in requests(scores):
        best = optimum(scores, objective, constraints)
        t0 = time.perf_counter()
        got = planner_value(sim, inst, inventory, objective, constraints)
        t_plan = time.perf_counter() - t0
        g = gap(objective, got, best)
        gaps.append(g)
        if g == 0:
            verdict = "optimal"
        elif g == float("inf"):
            verdict = f"feasibility mismatch (planner {got}, reference {best})"
        else:
            verdict = f"gap {g:+.3%} ({got:.6g} vs {best:.6g})"
        if missed(g):
            verdict = "MISSED: " + verdict
        print(
            f"{inst.name:18} {', '.join(inst.pools)[:58]:58} {label(objective, constraints):38} "
            f"{len(scores):>7} {t_enum:7.1f} {t_plan:7.2f}  {verdict}",
            flush=True,
        )


def distribution(gaps: list[float]) -> str:
    """How many answers are optimal, and the gap quantiles over all answers."""
    if not gaps:
        return "no instances ran"
    finite = sorted(g for g in gaps if g != float("inf"))
    q = statistics.quantiles(finite, n=10, method="inclusive") if len(finite) > 1 else finite
    text = (
        f"optimality gap over {len(gaps)} answers: {sum(g == 0 for g in gaps)} optimal; "
        f"median {statistics.median(finite):.2%}, p90 {q[-1]:.2%}, max {max(finite):.2%}"
    )
    if len(finite) < len(gaps):
        text += f"; {len(gaps) - len(finite)} feasibility mismatches"
    return text


def main() -> int:
    quick = "--quick" in sys.argv
    root = sailor_root()
    if root is None:
        print("original Sailor artifacts not found (../shared/reference or $SAILOR_REFERENCE)")
        return 1
    instances = SMALL + (SAILOR[:1] if quick else SAILOR + LARGE)
    builtin, sailor_sim = Simulator(), Simulator.from_sailor_root(root)
    print(
        f"{'instance':18} {'inventory':58} {'request':38} {'fitting':>7} {'enum s':>7} "
        f"{'plan s':>7}  result"
    )
    gaps: list[float] = []
    for inst in instances:
        run_instance(sailor_sim if inst.sailor else builtin, inst, gaps)
    print(distribution(gaps))
    print(f"bar: no gap above {MAX_GAP:.0%}")
    return 1 if any(missed(g) for g in gaps) else 0


if __name__ == "__main__":
    sys.exit(main())
