"""Check the profiler's per-layer times against a full-model measurement, and the extrapolation
from a few blocks (``--blocks K``) against profiling every block.

Prints, per model and microbatch size: the full model's forward + backward seconds (one process,
TP 1), the sum of the per-layer medians, the same sum when only K blocks are profiled and
copied, and both ratios. Fails when a ratio leaves [1 / TOLERANCE, TOLERANCE].

    uv run python bench/profiler_extrapolation.py [--device cpu] [--models tiny-gpt,tiny-llama]
"""

from __future__ import annotations

import argparse
import sys

from sailor_profiler.compute.measure import ComputeConfig, full_model_seconds, profile_rank
from sailor_profiler.devices import parse_device

TOLERANCE = 1.5
"""Per-layer runs add Python dispatch per layer; on a shared CPU times are noisy."""


def layer_sum(rows, mbs: int) -> float:
    return sum(r.fwd.median + r.bwd.median for r in rows if r.mbs == mbs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--models", default="tiny-gpt,tiny-llama")
    parser.add_argument("--mbs", default="1,4")
    parser.add_argument("--blocks", type=int, default=2)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    device = parse_device(args.device)
    mbs_values = tuple(int(m) for m in args.mbs.split(","))
    print(
        f"{'model':<12} {'mbs':>4} {'full s':>9} {'sum s':>9} {'sum/full':>9} "
        f"{'K-blocks s':>10} {'K/all':>7}"
    )
    failed = False
    for model in args.models.split(","):
        cfg = ComputeConfig(model, device, mbs=mbs_values, warmup=2, reps=args.reps)
        every = profile_rank(cfg)
        few = profile_rank(
            ComputeConfig(
                model, device, mbs=mbs_values, warmup=2, reps=args.reps, blocks=args.blocks
            )
        )
        for mbs in mbs_values:
            full = full_model_seconds(cfg, mbs).median
            total, extrapolated = layer_sum(every, mbs), layer_sum(few, mbs)
            r_full, r_few = total / full, extrapolated / total
            bad = not all(1 / TOLERANCE <= r <= TOLERANCE for r in (r_full, r_few))
            failed |= bad
            print(
                f"{model:<12} {mbs:>4} {full:>9.4f} {total:>9.4f} {r_full:>9.2f} "
                f"{extrapolated:>10.4f} {r_few:>7.2f}{'  <- outside bar' if bad else ''}"
            )
    print(f"bar: every ratio within [{1 / TOLERANCE:.2f}, {TOLERANCE:.2f}]")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
