"""Checkpoint interval under spot preemptions: Young/Daly's optimum against the trace replay.

A 30-day spot trace (32 A100-40 in us-central1-a at 1.10 $/GPU-hour; preemptions of 8 GPUs as a
Poisson process, mean 3 h apart, each replaced at once so the plan restarts unchanged: the
setting of Young's model) is replayed with the `sailor` policy at checkpoint intervals from 1/8x
to 8x Daly's optimum. The prediction is made first, from the trace and the reconfiguration model
alone: waste(tau) = delta/tau + (tau/2 + R)/M (Young 1974; sailor_planner/replay/spot.py), with M
the
trace's mean time between preemptions, delta the checkpoint save and R the reconfiguration model's
restart with detection (the planner's search time is fixed at PLAN_S for a deterministic R).
Then each replay measures its waste (1 - samples / (samples/s x duration)) and $/1M tokens.

Bars (exit 1 when missed): the replay's cost at Daly's interval is within 1 % of the cheapest
interval of the sweep; the predicted waste is within 10 % (relative) of the replay's at every
interval from 1/4x to 4x the optimum.

    uv run python bench/replay_checkpoint.py [--days 30] [--seed 15]
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from sailor_planner.replay.reconfig import ReconfigModel
from sailor_planner.replay.request import ReplayRequest
from sailor_planner.replay.run import replay
from sailor_planner.replay.spot import daly_interval, waste_fraction, young_interval
from sailor_planner.replay.trace import trace_from_rows
from sailor_planner.sources import planner_for
from sailor_sim import Job

PLAN_S = 0.1
COST_BAR = 0.01
WASTE_BAR = 0.10
POOL = {"zone": "us-central1-a", "gpu_type": "A100-40", "price": 1.10}


def spot_rows(days: float, seed: int, mean_gap_h: float = 3.0) -> list[dict]:
    rng = random.Random(seed)
    rows = [{"timestamp": 0.0, **POOL, "available": 32}]
    t = 0.0
    while (t := t + rng.expovariate(1 / (mean_gap_h * 3600))) < days * 86400:
        rows.append({"timestamp": t, **POOL, "available": 32, "preempted": 8})
    rows.append({"timestamp": days * 86400, **POOL, "available": 32})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=15)
    args = parser.parse_args()
    job = Job.create("OPT-350M", 256, 2048)
    trace = trace_from_rows(spot_rows(args.days, args.seed), "spot-30d")
    planner = planner_for()
    base = ReconfigModel(plan_s=PLAN_S)
    delta = base.save_s(job)
    restart = base.downtime_s(job, PLAN_S, noticed_late=True)
    mtbf = trace.duration_s / trace.preemptions
    daly, young = daly_interval(delta, mtbf), young_interval(delta, mtbf)
    factors = [2 ** (k / 2) for k in range(-6, 7)]
    predicted = {f: waste_fraction(f * daly, delta, mtbf, restart) for f in factors}

    start = time.perf_counter()
    rows = []
    for f in factors:
        model = ReconfigModel(plan_s=PLAN_S, checkpoint_interval_s=f * daly)
        result = replay(planner, ReplayRequest(job, trace, reconfig=model, policies=("sailor",)))
        s = result.summaries[0]
        rate = result.events[0].samples_per_s
        waste = 1 - s.samples / (rate * trace.duration_s)
        rows.append((f, f * daly, predicted[f], waste, s.usd_per_million_tokens))
    elapsed = time.perf_counter() - start

    print(
        f"\nCheckpoint interval under spot preemptions: {job.model.name} on 32 A100-40 (spot "
        f"1.10 $/GPU-h), {args.days:g} days, {trace.preemptions} preemptions (one per "
        f"{mtbf / 3600:.2f} h)\ncheckpoint save delta = {delta:.2f} s, restart R = {restart:.2f} s;"
        f" Daly optimum {daly:.0f} s, Young {young:.0f} s; {len(rows)} replays in {elapsed:.1f} s\n"
    )
    print(f"{'x Daly':>7} {'interval s':>10} {'waste pred.':>11} {'waste replay':>12} "
          f"{'error':>7} {'$/1M tok':>9}")  # fmt: skip
    failed = False
    for f, tau, pred, waste, usd in rows:
        err = (pred - waste) / waste
        checked = 0.25 <= f <= 4.0
        miss = checked and abs(err) > WASTE_BAR
        failed |= miss
        mark = "MISSED" if miss else ("ok" if checked else "")
        print(
            f"{f:>7.2f} {tau:>10.0f} {pred:>11.2%} {waste:>12.2%} {err:>+7.1%} {usd:>9.5f}  {mark}"
        )
    best = min(rows, key=lambda r: r[4])
    at_daly = next(r for r in rows if r[0] == 1.0)
    gap = at_daly[4] / best[4] - 1
    ok = gap <= COST_BAR
    failed |= not ok
    print(
        f"\ncheapest replayed interval {best[1]:.0f} s ({best[0]:.2f}x Daly): {best[4]:.5f} $/1M "
        f"tokens; at Daly's {daly:.0f} s: {at_daly[4]:.5f} (+{gap:.2%}, bar {COST_BAR:.0%}) "
        f"{'ok' if ok else 'MISSED'}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
