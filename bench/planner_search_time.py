"""Planner speed: the whole `sailor-planner plan` command on the two target scenarios, and search
time from 32 to 2048 GPUs with 1, 2 and 4 GPU types (cold, and a warm re-plan after 1/8 of the
GPUs left).

Targets (whole command: load, search, output): <= 1 s for 512 GPUs (128 A100-40 + 128 V100-16
in each of 2 zones) and <= 2 s for 640 GPUs (128 A100-40 in each of 5 zones, 2 regions), in the
original Sailor's search space (`--fixed-options`); <= 2 s for the 512-GPU case with the
execution-option search on. Wall
time depends on what else runs on the machine, so CPU time (user + sys) is printed next to it.

    uv run python bench/planner_search_time.py
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
TYPES = ("A100-40", "V100-16", "A100-80", "GH-96")
REPEATS = 3


def command_cases():
    """The original Sailor's search space (the plan, for the job's fixed execution options:
    OPT-350M fp32 as its paper ran it) with its targets; then the same first scenario with the
    execution-option search on (recompute / ZeRO / SP: two more searches under the lean
    options and a re-scoring of the best plans; a wider search space with its own target)."""
    both = [f"--gpus={g}@{z}=128" for g in ("A100-40", "V100-16") for z in ZONES_2]
    five = [f"--gpus=A100-40@{z}=128" for z in ZONES_5]
    fixed = ["--fixed-options"]
    yield "512 GPUs, max throughput", both + fixed, 1.0
    yield (
        "512 GPUs, min cost @ >= 0.2 it/s",
        both + fixed + ["--objective=cost", "--min-throughput=0.2"],
        1.0,
    )
    yield "512 GPUs, max thr @ <= 1.2 $/it", both + fixed + ["--max-cost-per-iteration=1.2"], 1.0
    yield "640 GPUs, 5 zones, max throughput", five + fixed, 2.0
    yield "512 GPUs, max thr, + option search", both + ["--search-options"], 2.0


def run_command(args: list[str]) -> tuple[float, float, dict]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run([SCRIPT, *args], capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise SystemExit(f"sailor-planner failed: {out.stderr.strip()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, json.loads(out.stdout)


def whole_command() -> bool:
    root = sailor_root()
    base = ["plan", "--model", "OPT-350M", "--gbs", "1024", "--seq-len", "2048", "--json"]
    if root is not None:
        base += ["--sailor-root", str(root)]
    print(
        f"whole command (`sailor-planner plan ... --json`, median of {REPEATS}; load "
        f"average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)"
    )
    print(
        f"{'scenario':36} {'wall s':>7} {'cpu s':>7} {'search s':>8} {'target':>6}  "
        f"{'iter/s':>7} {'$/iter':>7}  plan"
    )
    ok = True
    for name, args, target in command_cases():
        runs = [run_command(base + args) for _ in range(REPEATS)]
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        data = runs[0][2]
        e = data["estimate"]
        stages = len(data["plan"]["stages"])
        gpus = sum(r["tp"] for s in data["plan"]["stages"] for r in s["replicas"])
        met = "ok" if cpu <= target else "MISSED"
        ok &= cpu <= target
        print(
            f"{name:36} {wall:7.2f} {cpu:7.2f} {data['search_time_s']:8.2f} {target:5.1f}{met[0]} "
            f" {e['throughput_iters_per_s']:7.4f} {e['cost_per_iteration_usd']:7.3f}  "
            f"PP{stages}, {gpus} GPUs"
        )
    return ok


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
    scaling_table()
    if not ok:
        print("a whole-command CPU-time target was missed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
