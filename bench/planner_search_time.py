"""Planner speed: the whole `sailor-planner plan` command on the target scenarios, and search
time from 32 to 2048 GPUs with 1, 2 and 4 GPU types (cold, and a warm re-plan after 1/8 of the
GPUs left).

Targets (issue 22), CPU time (user + sys) of the whole command (load, search, output) and the
search time it reports, median of 3:
- 512 GPUs (128 A100-40 + 128 V100-16 in each of us-central1-a/b, original Sailor profiles and
  network fits), the CLI's defaults (execution-option search on): search <= 0.3 s, whole
  command <= 0.6 s CPU, for max throughput, min cost at >= 0.2 it/s and max throughput at
  <= 1.2 $/it;
- the option search costs < 20 % on top of the same search with `--fixed-options`;
- 640 GPUs (128 A100-40 in each of 5 zones, 2 regions): whole command <= 2 s CPU;
- 4096 GPUs (128 each of A100-40, V100-16, A100-80, GH-96 in 8 zones of 3 regions): whole
  command <= 2 s CPU.
Wall time depends on what else runs on the machine, so CPU time is printed next to it. Exits 1
when a target is missed. The command runs as an installed one does after its first run: Python
may cache its bytecode (``PYTHONDONTWRITEBYTECODE`` is dropped for the command, so an
environment that sets it does not charge every run ~0.1 s CPU of compiling the imports), and
one untimed warm-up run compiles it first.

    uv run python bench/planner_search_time.py [--quick]   (quick: no scaling table)
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _planner_common import sailor_root, simulator

from sailor_planner.planner import Planner
from sailor_planner.request import SearchOptions
from sailor_sim import Inventory, Job

SCRIPT = str(Path(sys.executable).parent / "sailor-planner")
ZONES_2 = ("us-central1-a", "us-central1-b")
ZONES_5 = ("us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f", "us-west1-b")
ZONES_8 = (*ZONES_5[:4], "us-east1-b", "us-east1-c", "us-west1-a", "us-west1-b")
SEARCH_TARGET_S = 0.3
"""Search time of the 512-GPU cases (the command's reported search_time_s, wall)."""
OPTION_OVERHEAD = 1.2
"""Option search / fixed-options search, 512 GPUs max throughput (search CPU)."""
TYPES = ("A100-40", "V100-16", "A100-80", "GH-96")
REPEATS = 3


def command_cases():
    """(name, extra args, whole-command CPU target s, search target s or None)."""
    both = [f"--gpus={g}@{z}=128" for g in ("A100-40", "V100-16") for z in ZONES_2]
    five = [f"--gpus=A100-40@{z}=128" for z in ZONES_5]
    many = [f"--gpus={g}@{z}=128" for g in TYPES for z in ZONES_8]
    yield "512 GPUs, max throughput", both, 0.6, SEARCH_TARGET_S
    yield (
        "512 GPUs, min cost @ >= 0.2 it/s",
        both + ["--objective=cost", "--min-throughput=0.2"],
        0.6,
        SEARCH_TARGET_S,
    )
    yield (
        "512 GPUs, max thr @ <= 1.2 $/it",
        both + ["--max-cost-per-iteration=1.2"],
        0.6,
        (SEARCH_TARGET_S),
    )
    yield "512 GPUs, max thr, --fixed-options", both + ["--fixed-options"], 0.6, SEARCH_TARGET_S
    yield "640 GPUs, 5 zones, max throughput", five, 2.0, None
    yield "4096 GPUs, 4 types x 8 zones", many, 2.0, None


COMMAND_TIMEOUT_S = 300
COMMAND_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
"""The command's environment: bytecode cached as after an install's first run."""


REFERENCE_LOOP = 5_000_000
"""Additions of the machine-speed reference: the development machine's speed moves between
sessions (2x between two days of 2026-11), so prints of this bench are compared through it."""


def reference_loop_s() -> float:
    """CPU seconds of a pure-Python loop of REFERENCE_LOOP additions (the search is Python and
    small numpy calls, so it scales with this)."""
    start, total = time.process_time(), 0
    for i in range(REFERENCE_LOOP):
        total += i
    return time.process_time() - start


def cpu_target_is_large(target: float) -> bool:
    return target >= 2.0


def run_command(args: list[str]) -> tuple[float, float, dict]:
    """(wall s, CPU s, the JSON it printed); a command past COMMAND_TIMEOUT_S is a miss."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    try:
        out = subprocess.run(
            [SCRIPT, *args],
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
            env=COMMAND_ENV,
        )
    except subprocess.TimeoutExpired:
        inf = float("inf")
        return inf, inf, {"search_time_s": inf, "estimate": None, "plan": None}
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise SystemExit(f"sailor-planner failed: {out.stderr.strip()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, json.loads(out.stdout)


def whole_command() -> bool:
    root = sailor_root()
    if root is None:
        raise SystemExit("original Sailor artifacts not found (../shared/reference)")
    base = ["plan", "--model", "OPT-350M", "--gbs", "1024", "--seq-len", "2048", "--json"]
    if root is not None:
        base += ["--sailor-root", str(root)]
    print(
        f"whole command (`sailor-planner plan ... --json`, median of {REPEATS} rounds over the "
        f"cases (1 for the 2 s cases); load "
        f"average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; reference loop "
        f"{reference_loop_s():.2f} CPU s)"
    )
    print(
        f"{'scenario':36} {'wall s':>7} {'cpu s':>7} {'search s':>8} {'bars':>8}  "
        f"{'iter/s':>7} {'$/iter':>7}  plan"
    )
    ok = True
    searched = {}
    run_command(base + next(command_cases())[1])  # warm-up: compiles and caches the bytecode
    cases = list(command_cases())
    # Round-robin over the cases, so that a stretch of load on a shared machine lands on all of
    # them alike: run back to back per case, the same code printed an options / fixed ratio of
    # 1.10x and 2.72x minutes apart (2026-11-29).
    runs_of: dict[str, list] = {name: [] for name, *_ in cases}
    for round_ in range(REPEATS):
        for name, args, target, _search_target in cases:
            if round_ == 0 or not cpu_target_is_large(target):  # minutes each when missed
                runs_of[name].append(run_command(base + args))
    for name, _args, target, search_target in cases:
        runs = runs_of[name]
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        search = statistics.median(r[2]["search_time_s"] for r in runs)
        searched[name] = search
        data = runs[0][2]
        e = data["estimate"] or {"throughput_iters_per_s": 0.0, "cost_per_iteration_usd": 0.0}
        plan = data["plan"] or {"stages": []}
        stages = len(plan["stages"])
        gpus = sum(r["tp"] for s in plan["stages"] for r in s["replicas"])
        met = cpu <= target and (search_target is None or search <= search_target)
        ok &= met
        bar = f"{target:.1f}" + (f"/{search_target:.1f}" if search_target else "")
        print(
            f"{name:36} {wall:7.2f} {cpu:7.2f} {search:8.2f} {bar:>7}{' ' if met else '!'} "
            f" {e['throughput_iters_per_s']:7.4f} {e['cost_per_iteration_usd']:7.3f}  "
            f"PP{stages}, {gpus} GPUs{'' if met else '  MISSED'}"
        )
    on, off = searched["512 GPUs, max throughput"], searched["512 GPUs, max thr, --fixed-options"]
    ratio = on / off if off > 0 else float("inf")
    print(
        f"option search / fixed options (512 GPUs, max throughput): {ratio:.2f}x "
        f"(target <= {OPTION_OVERHEAD:.1f}x){'' if ratio <= OPTION_OVERHEAD else '  MISSED'}"
    )
    return ok and ratio <= OPTION_OVERHEAD


def inventory(total: int, types: int) -> Inventory:
    per = total // (types * 2)
    return Inventory.parse([f"{g}@{z}={per}" for g in TYPES[:types] for z in ZONES_2])


def scaling_table() -> None:
    sim, source = simulator()
    job = Job.create("OPT-350M", 1024, 2048, "fp32")
    print(
        f"\nsearch time (in-process; cold = fresh planner; re-plan with the previous plan after "
        f"1/8 of every pool left / joined, same planner); profiles: {source}"
    )
    print(
        f"{'GPUs':>5} {'types':>5} {'cold s':>7} {'cpu s':>6} {'left s':>7} {'joined s':>8} "
        f"{'evaluated':>9} {'pruned':>8} {'eval/s':>7} {'iter/s':>7}  plan"
    )
    for total in (32, 64, 128, 256, 512, 1024, 2048):
        for types in (1, 2, 4):
            inv = inventory(total, types)
            planner = Planner(sim)
            t0, c0 = time.perf_counter(), time.process_time()
            cold = planner.plan(job, inv, SearchOptions())
            cold_s, cold_cpu = time.perf_counter() - t0, time.process_time() - c0
            warm = []
            for sign in (-1, 1):
                changed = Inventory.parse(
                    [f"{p.gpu_type}@{p.zone}={p.count + sign * (p.count // 8)}" for p in inv.pools]
                )
                t0 = time.perf_counter()
                planner.plan(job, changed, SearchOptions(), previous=cold.best.plan)
                warm.append(time.perf_counter() - t0)
            st = cold.stats
            print(
                f"{total:5} {types:5} {cold_s:7.2f} {cold_cpu:6.2f} {warm[0]:7.3f} {warm[1]:8.3f} "
                f"{st.candidates_evaluated:9} {st.pruned:8} {st.evaluations_per_s:7.0f} "
                f"{cold.best.estimate.throughput_iters_per_s:7.4f}  "
                f"{cold.best.plan.describe()[:60]}"
            )
            sys.stdout.flush()


def main() -> int:
    ok = whole_command()
    if "--quick" not in sys.argv:  # --quick: the targets only
        scaling_table()
    if not ok:
        print("a whole-command CPU-time target was missed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
