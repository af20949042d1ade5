"""Write the example availability traces of this folder (seeded, so the files are reproducible).

    uv run python packages/sailor-planner/examples/traces/make_traces.py

- ``multiday.csv``: 3 days, A100-40 and V100-16 in us-central1-a, -b and -c;
  every 1-4 hours one pool gains or loses 1-4 nodes of 8 GPUs (a random walk between 0 and 64
  GPUs per pool), on-demand prices (the catalog's).
- ``spot.csv``: 2 days of one spot pool of 32 A100-40 in us-central1-a at a spot price of
  1.10 $/GPU-hour; preemptions arrive as a Poisson process (mean 3 h between them) and take 8
  GPUs each, given back after 20-40 minutes.
"""

from __future__ import annotations

import random
from pathlib import Path

from sailor_planner.replay.trace import write_trace

HERE = Path(__file__).parent
POOLS = [
    (g, z)
    for g in ("A100-40", "V100-16")
    for z in ("us-central1-a", "us-central1-b", "us-central1-c")
]


def multiday(seed: int = 15, days: float = 3.0) -> list[dict]:
    rng = random.Random(seed)
    counts = {pool: rng.choice((16, 32, 48)) for pool in POOLS}
    rows = [{"timestamp": 0.0, "zone": z, "gpu_type": g, "available": n}
            for (g, z), n in counts.items()]  # fmt: skip
    t = 0.0
    while True:
        t += rng.uniform(1.0, 4.0) * 3600
        if t >= days * 86400:
            break
        pool = rng.choice(POOLS)
        counts[pool] = max(0, min(64, counts[pool] + 8 * rng.choice((-4, -2, -1, 1, 2, 4))))
        rows.append({"timestamp": round(t), "zone": pool[1], "gpu_type": pool[0],
                     "available": counts[pool]})  # fmt: skip
    rows.append({"timestamp": days * 86400, "zone": POOLS[0][1], "gpu_type": POOLS[0][0],
                 "available": counts[POOLS[0]]})  # fmt: skip
    return rows


def spot(seed: int = 15, days: float = 2.0, mean_gap_h: float = 3.0) -> list[dict]:
    rng = random.Random(seed)
    pool = {"zone": "us-central1-a", "gpu_type": "A100-40", "price": 1.10}
    rows = [{"timestamp": 0.0, **pool, "available": 32, "preempted": 0}]
    t = 0.0
    while True:
        t += rng.expovariate(1.0 / (mean_gap_h * 3600))
        back = t + rng.uniform(20, 40) * 60
        if back >= days * 86400:
            break
        rows.append({"timestamp": round(t), **pool, "available": 24, "preempted": 8})
        rows.append({"timestamp": round(back), **pool, "available": 32, "preempted": 0})
        t = back
    rows.append({"timestamp": days * 86400, **pool, "available": 32, "preempted": 0})
    return rows


if __name__ == "__main__":
    print(write_trace(multiday(), HERE / "multiday.csv"))
    print(write_trace(spot(), HERE / "spot.csv"))
