"""Check and calibrate the simulator's analytic (roofline) layer times against measured profiles.

For every measured profile entry (source 'measured') in a profile folder: per layer, the
analytic forward / backward seconds (``sailor_sim.profiles.analytic.layer_times``) against the
measured
ones. Prints the error before; fits the GPU type's compute efficiency (the achieved fraction of
peak in ``analytic.COMPUTE_EFFICIENCY``) as the median over compute-bound layers of
FLOPs / (peak * (measured - kernel overhead)); prints the error after and the line to put in
the catalog. This is the calibration step of the profiler issue's item 4: run it on a profile
measured on a GPU (``sailor-profiler compute --device cuda ...``).

    uv run python bench/profiler_calibrate.py [--profile DIR]   (default: a fresh tiny-gpt CPU
                                                                 profile, TP 1, mbs 1,2,4)
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from sailor_sim import get_gpu, get_model
from sailor_sim.profiles import analytic
from sailor_sim.simulate.simulator import Simulator


def errors(entries, eff=None) -> dict[str, float]:
    """Median absolute relative error of forward, backward and per-entry totals."""
    fwd, bwd, total = [], [], []
    for e in entries:
        model, gpu = get_model(e.key.model), get_gpu(e.key.gpu_type)
        saved = analytic.COMPUTE_EFFICIENCY.get(gpu.name)
        if eff is not None:
            analytic.COMPUTE_EFFICIENCY[gpu.name] = eff
        try:
            est = [
                analytic.layer_times(
                    model, i, gpu, e.key.dtype, e.key.microbatch_size, e.sequence_length, e.key.tp
                )
                for i in range(model.num_layer_ids)
            ]
        finally:
            if saved is not None:
                analytic.COMPUTE_EFFICIENCY[gpu.name] = saved
        for (f, b), layer in zip(est, e.layers, strict=True):
            fwd.append(abs(f / layer.forward_s - 1))
            bwd.append(abs(b / layer.backward_s - 1))
        measured = sum(x.forward_s + x.backward_s for x in e.layers)
        total.append(abs(sum(f + b for f, b in est) / measured - 1))
    return {
        "forward": statistics.median(fwd),
        "backward": statistics.median(bwd),
        "entry total": statistics.median(total),
    }


def fit_efficiency(entries) -> analytic.Efficiency:
    fwd, bwd = [], []
    for e in entries:
        model, gpu = get_model(e.key.model), get_gpu(e.key.gpu_type)
        peak = gpu.peak_flops(e.key.dtype, allow_tf32=True)
        for i, layer in enumerate(e.layers):
            flops = model.forward_flops(i, e.key.microbatch_size, e.sequence_length, e.key.tp)
            if model.layer_kind(i) != "block" or flops == 0:
                continue
            for measured, mult, out in ((layer.forward_s, 1, fwd), (layer.backward_s, 2, bwd)):
                busy = measured - analytic.KERNEL_OVERHEAD_S
                if busy > 0:
                    out.append(mult * flops / (peak * busy))
    return analytic.Efficiency(
        statistics.median(fwd),
        statistics.median(bwd),
        f"fit to sailor-profiler measurements ({len(fwd)} blocks)",
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.profile
        if folder is None:
            folder = Path(tmp)
            exe = Path(sys.executable).parent / "sailor-profiler"
            subprocess.run(
                [
                    str(exe),
                    "compute",
                    "--model",
                    "tiny-gpt",
                    "--mbs",
                    "1,2,4",
                    "--out",
                    tmp,
                    "--json",
                    "--no-plot",
                ],
                check=True,
                capture_output=True,
            )
        entries = [
            e
            for e in Simulator.from_profile_dir(folder).profiles.entries()
            if e.source == "measured"
        ]
    if not entries:
        print("no measured entries in the profile folder", file=sys.stderr)
        return 1
    for gpu in sorted({e.key.gpu_type for e in entries}):
        mine = [e for e in entries if e.key.gpu_type == gpu]
        eff = fit_efficiency(mine)
        before, after = errors(mine), errors(mine, eff)
        old = analytic.efficiency(get_gpu(gpu))
        print(
            f"{gpu}: {len(mine)} measured entries; efficiency fwd/bwd "
            f"{old.forward:.3g}/{old.backward:.3g} -> {eff.forward:.3g}/{eff.backward:.3g}"
        )
        print(f"{'median |error|':<16} {'before':>8} {'after':>8}")
        for what in before:
            print(f"{what:<16} {before[what]:>8.0%} {after[what]:>8.0%}")
        print(
            f'catalog line: "{gpu}": Efficiency({eff.forward:.3g}, {eff.backward:.3g}, '
            f'"{eff.source}"),'
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
