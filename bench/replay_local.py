"""The trace replay's prediction against a real elastic run on this machine.

`sailor run --local --trace` on a scaled trace of CPU workers (tiny-gpt): 3 workers, one leaves
gracefully, it joins back, one is preempted (kill -9), it joins back. After a calibration window
on the first generation (run/calibrate.py: the ranks' CPU stretch, wall time per step with
checkpoint saves, restart and place phases, an agent's start time and CPU), and before the trace's
first change, the replay predicts the samples trained by the trace's end (policy every-change,
the planner on this machine's profile, the reconfiguration model with those measured phases);
then the run trains and its trained step x global batch at the trace's end is the measurement.
Bar: within 25 % of the prediction (exit 1 when missed or the run fails, with what differed
between the calibration and the run: the machine's load, step time, reconfiguration time).

    uv run python bench/replay_local.py [--state-s 45]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from sailor_planner.replay.trace import read_trace
from sailor_runtime.run.local import LocalRunConfig
from sailor_runtime.run.tracerun import run_trace

BAR = 0.25
COUNTS = ((3, 0), (2, 0), (3, 0), (2, 1), (3, 0))
"""(CPU workers, of which preempted) per state; 100 trace seconds each."""


def write_trace(folder: Path) -> Path:
    lines = ["timestamp,zone,gpu_type,available,preempted"]
    for i, (n, lost) in enumerate(COUNTS):
        lines.append(f"{i * 100},local,CPU,{n},{lost or ''}")
    lines.append(f"{len(COUNTS) * 100},local,CPU,{COUNTS[-1][0]},")
    path = folder / "local-trace.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--state-s", type=float, default=45.0, help="Wall seconds per state.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sailor-replay-local-") as tmp:
        trace = read_trace(write_trace(Path(tmp)))
        cfg = LocalRunConfig.create(run_dir=Path(tmp) / "run", checkpoint_every=10, progress=False)
        try:
            r = run_trace(cfg, trace, time_scale=100.0 / args.state_s)
        except Exception as exc:  # noqa: BLE001 - a failed run is a missed bar, reported
            print(f"the local run failed: {exc}")
            return 1
    ok = abs(r.error) <= BAR
    print(
        f"\nReplay prediction vs `sailor run --local --trace` (tiny-gpt, gbs "
        f"{cfg.global_batch_size}, CPU workers {' -> '.join(str(n) for n, _ in COUNTS)}, "
        f"{args.state_s:g} s per state)\n"
    )
    print(f"{'':<28}{'replay':>12}{'run':>12}")
    print(f"{'samples trained':<28}{r.predicted_samples:>12,.0f}{r.measured_samples:>12,.0f}")
    print(f"{'reconfigurations':<28}{r.predicted_reconfigurations:>12}{r.reconfigurations:>12}")
    print(
        f"{'training stopped (s)':<28}{r.predicted_reconfigure_s:>12.1f}"
        f"{r.measured_reconfigure_s:>12.1f}"
    )
    print(
        f"{'iteration time (ms)':<28}{r.predicted_iteration_s * 1e3:>12.1f}"
        f"{r.measured_iteration_s * 1e3:>12.1f}"
    )
    c = r.calibration
    print(f"\n{'state':<6}{'CPU workers':>12}{'replay':>9}{'run':>9}{'error':>7}{'load':>7}")
    for i, ((pred, got), load) in enumerate(zip(r.per_state, r.runnable, strict=False)):
        print(
            f"{i:<6}{COUNTS[i][0]:>12}{pred:>9,.0f}{got:>9,.0f}{error(got, pred):>+7.0%}"
            f"{load:>7.1f}"
        )
    print(
        f"{'all':<6}{'':>12}{r.predicted_samples:>9,.0f}{r.measured_samples:>9,.0f}"
        f"{r.error:>+7.0%}{c.runnable:>7.1f}"
    )
    print("load: runnable processes on the machine, mean over the state ('all': the calibration's)")
    print(
        f"\ncalibration (first generation, before the trace; run/calibrate.py): ranks' CPU "
        f"stretch {c.stretch:.2f}, {c.wall_step_s * 1e3:.1f} ms per step with checkpoint saves, "
        f"restart {c.restart_s:.2f} s, agent start {c.boot_s:.1f} s and "
        f"{c.boot_cpu_s:.1f} CPU s (training lost per join {c.provision_stall_s:.1f} s), "
        f"{c.runnable:.1f} runnable processes on {c.cores} cores"
    )
    print(f"runnable processes per state: {', '.join(f'{x:.1f}' for x in r.runnable)}")
    print(f"\nerror {r.error:+.1%} (bar {BAR:.0%}): {'ok' if ok else 'MISSED'}")
    if not ok:
        for line in why_missed(r):
            print(f"  why: {line}")
    return 0 if ok else 1


def error(got: float, want: float) -> float:
    return got / want - 1 if want else float("nan")


def why_missed(r) -> list[str]:
    """What differed between the calibration (what the prediction knew) and the run."""
    c, lines = r.calibration, []
    load = sum(r.runnable) / len(r.runnable) if r.runnable else 0.0
    if load > c.runnable * (1 + BAR):
        lines.append(
            f"the machine's load rose from {c.runnable:.1f} runnable processes at the "
            f"calibration to {load:.1f} during the trace (other work on these {c.cores} cores): "
            "the ranks got less CPU than the prediction could know"
        )
    if r.measured_iteration_s > r.predicted_iteration_s * (1 + BAR):
        lines.append(
            f"steps took {r.measured_iteration_s * 1e3:.0f} ms (median) against "
            f"{r.predicted_iteration_s * 1e3:.0f} ms simulated at the calibration's stretch"
        )
    if r.measured_reconfigure_s > r.predicted_reconfigure_s + 0.1 * r.trace_wall_s:
        lines.append(
            f"training stopped {r.measured_reconfigure_s:.0f} s for reconfigurations against "
            f"{r.predicted_reconfigure_s:.0f} s predicted from the calibration's phases"
        )
    return lines or ["none of load, step time or reconfiguration time explains it alone"]


if __name__ == "__main__":
    sys.exit(main())
