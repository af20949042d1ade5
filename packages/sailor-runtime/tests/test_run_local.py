"""`sailor run --local` end to end: planner server, controller, 2 worker agents of 2 CPU worker
types (2 threads on 2 cores, 1 thread on 1 core; each profiled as it runs), the real engine, and
the simulator's prediction from this machine's profile."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


@pytest.mark.timeout(420)
def test_local_run_with_two_worker_types_trains_and_is_predicted(tmp_path):
    out = tmp_path / "summary.json"
    cmd = [
        sys.executable, "-m", "sailor_runtime.cli", "run", "--local", "--workers", "2",
        "--gpu-types", "cpu-2t,cpu-1t", "--model", "tiny-gpt", "--steps", "14",
        "--checkpoint-every", "7", "--run-dir", str(tmp_path / "run"), "--json", str(out),
        "--timeout", "330", "--verbose", "--heartbeat-timeout", "10",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "T4" not in proc.stdout and "emulat" not in proc.stdout
    s = json.loads(out.read_text())
    assert s["state"] == "DONE" and s["steps"] == 14
    assert s["final_loss"] < s["first_loss"] - 0.3
    assert "simulator" in proc.stdout and "re-plans" in proc.stdout
    # The plan may use either node; its types come from the two declared ones, each
    # profiled under its own name with its own threads.
    plan = json.loads(s["reconfigurations"][-1]["plan"])
    types = {r["gpu_type"] for st in plan["stages"] for r in st["replicas"]}
    assert types <= {"cpu-1t", "cpu-2t"}
    assert s["reconfigurations"][0]["inventory"] == "cpu-1t@local=1, cpu-2t@local=1"
    profiles = {p.name for p in (tmp_path / "run" / "profiling").glob("compute-*")}
    assert profiles == {"compute-cpu-1t", "compute-cpu-2t"}
    assert s["predicted_iteration_s"] > 0
    # The 25 % accuracy bar is measured and reported by bench/reconfig_time.py (team rule:
    # accuracy numbers live in bench/); here the prediction must be of the right size, which
    # fails when the profile is not this machine's, the CPU sharing is ignored (5-10x), the
    # collectives are measured back to back (0.6x) or something imports torch while the ranks
    # train (1.6-3x, the warm spares this agent used to refill).
    assert 2 / 3 <= s["measured_iteration_s"] / s["predicted_iteration_s"] <= 1.5, (
        f"measured {s['measured_iteration_s']:.4f} s vs predicted "
        f"{s['predicted_iteration_s']:.4f} s for {s['plan']}"
    )


def test_local_run_refuses_gpu_names_for_cpu_processes(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "sailor_runtime.cli", "run", "--local", "--gpu-types",
         "cpu-1t,T4", "--run-dir", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "T4 is not a CPU worker type" in proc.stderr and "cpu-1t" in proc.stderr
