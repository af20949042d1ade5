"""The profiler's done-when run: tiny-gpt on CPU, microbatch sizes 1, 2, 4 and TP 1, 2, through
the real command (a fresh process, start-up included), then the simulator on the result.

Prints the wall time, per (TP, mbs) the summed per-layer times and activation bytes, and the
simulated iteration time of a few plans. Fails when the sweep takes longer than BAR_S.

    uv run python bench/profiler_tiny_sweep.py
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sailor_sim import Job, Plan
from sailor_sim.simulate.simulator import Simulator

BAR_S = 60.0
COMMAND = ["compute", "--model", "tiny-gpt", "--device", "cpu", "--mbs", "1,2,4", "--tp", "1,2"]


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    exe = Path(sys.executable).parent / "sailor-profiler"
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        cpu0 = _children_cpu_s()
        proc = subprocess.run(
            [str(exe), *COMMAND, "--out", tmp, "--json"], capture_output=True, text=True
        )
        wall = time.perf_counter() - start
        cpu = _children_cpu_s() - cpu0
        if proc.returncode != 0:
            print(proc.stderr, file=sys.stderr)
            return 1
        summary = json.loads(proc.stdout)
        print(
            f"sailor-profiler {' '.join(COMMAND)}: {wall:.1f} s (bar {BAR_S:.0f} s), of "
            f"which the sweep {summary['sweep_s']:.1f} s (the rest: start-up, files, plots); "
            f"CPU time {cpu:.1f} s (load average {os.getloadavg()[0]:.1f})"
        )
        print(f"{'tp':>3} {'mbs':>4} {'fwd ms':>8} {'bwd ms':>8} {'opt ms':>8} {'stash MB':>9}")
        for e in summary["entries"]:
            print(
                f"{e['tp']:>3} {e['microbatch_size']:>4} {e['forward_s'] * 1e3:>8.2f} "
                f"{e['backward_s'] * 1e3:>8.2f} {e['optimizer_s'] * 1e3:>8.2f} "
                f"{e['activation_stash_bytes'] / 1e6:>9.2f}"
            )
        sim = Simulator.from_profile_dir(tmp)
        job = Job.create("tiny-gpt", 16, 128)
        print(f"{'plan':<24} {'iteration s':>12} {'source':>10}")
        for pp, dp, tp in ((1, 1, 1), (2, 1, 1), (2, 1, 2), (1, 2, 2)):
            plan = Plan.uniform(job, "CPU", "local", pp=pp, dp=dp, tp=tp, microbatch_size=2)
            est = sim.estimate(job, plan)
            print(
                f"{f'pp={pp} dp={dp} tp={tp} mbs=2':<24} {est.iteration_time_s:>12.4f} "
                f"{','.join(est.sources):>10}"
            )
    return 0 if wall <= BAR_S else 1


if __name__ == "__main__":
    sys.exit(main())
