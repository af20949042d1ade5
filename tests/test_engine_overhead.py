"""bench/engine_overhead.py measures both sides in one set of processes and fails on a miss.

The real bar (1.10) is the bench's business (a shared 2-core CI machine cannot hold it
reliably); here a bar of 0 must be missed, with both sides measured and the ratio printed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[1] / "bench" / "engine_overhead.py"


def test_both_sides_measured_and_a_missed_bar_exits_1(tmp_path):
    cmd = [sys.executable, str(SCRIPT), "--seq", "32", "--gbs", "4", "--steps", "4"]
    cmd += ["--trials", "1", "--bar", "0"]  # no --out: the ranks write where the parent reads
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    engine = next(x for x in lines if x.startswith("engine"))
    ddp = next(x for x in lines if x.startswith("DDP"))
    assert float(engine.split()[1]) > 0 and float(ddp.split()[1]) > 0
    assert engine.split()[2] == ddp.split()[2] == "2"  # 4 steps - 2 warm-up, one trial
    assert lines[-1].startswith("MISS engine / DDP step time ratio")


def test_bad_arguments_exit_2():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--gbs", "3", "--ranks", "2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "divisible" in done.stderr.strip().splitlines()[-1]
