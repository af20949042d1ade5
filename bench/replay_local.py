"""The trace replay's prediction against a real elastic run on this machine.

`sailor run --local --trace` on a scaled trace of CPU workers (tiny-gpt): 3 workers, one leaves
gracefully, it joins back, one is preempted (kill -9), it joins back. Before any worker starts,
the replay predicts the samples trained by the trace's end (policy every-change, the planner on
this machine's profile, the reconfiguration model with the runtime's measured local phases);
then the run trains and its trained step x global batch at the trace's end is the measurement.
Bar: within 25 % of the prediction (exit 1 when missed or the run fails).

    uv run python bench/replay_local.py [--state-s 45]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from sailor_planner.trace import read_trace
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
        cfg = LocalRunConfig(run_dir=Path(tmp) / "run", checkpoint_every=10, progress=False)
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
    print(f"\n{'state':<8}{'CPU workers':>12}{'replay':>10}{'run':>10}{'error':>8}")
    for i, (pred, got) in enumerate(r.per_state):
        err = got / pred - 1 if pred else float("nan")
        print(f"{i:<8}{COUNTS[i][0]:>12}{pred:>10,.0f}{got:>10,.0f}{err:>+8.0%}")
    print(
        f"warm-up calibration: agents registered {r.boot_s:.1f} s after start (the replay's boot "
        f"time for joins), ranks' CPU stretch {r.stretch:.2f}"
    )
    print(f"\nerror {r.error:+.1%} (bar {BAR:.0%}): {'ok' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
