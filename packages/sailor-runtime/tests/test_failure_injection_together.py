"""`sailor run --local` with two failure injections in one run: each one happens, at its own
step. `--kill-rank-at-step 3 --kill-worker-at-step 7` used to kill only the worker (at step 7);
the rank kill was dropped without a word (one "killed" flag served both)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


@pytest.mark.timeout(300)
def test_kill_rank_and_kill_worker_both_happen(tmp_path):
    out = tmp_path / "summary.json"
    cmd = [
        sys.executable, "-m", "sailor_runtime.cli", "run", "--local", "--workers", "2",
        "--no-profile", "--model", "tiny-gpt", "--steps", "10", "--seq-len", "32",
        "--global-batch-size", "8", "--checkpoint-every", "2", "--kill-rank-at-step", "3",
        "--kill-worker-at-step", "7", "--run-dir", str(tmp_path / "run"), "--json", str(out),
        "--timeout", "240",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    s = json.loads(out.read_text())
    assert s["state"] == "DONE" and s["steps"] == 10
    kinds = [e["event"].split(" rank")[0] + (" rank" if " rank" in e["event"] else "")
             for e in s["events"]]  # fmt: skip
    assert kinds == ["kill -9 rank", "kill -9"], s["events"]
    rank_kill, worker_kill = s["events"]
    assert 3 <= rank_kill["step"] < 7 <= worker_kill["step"], s["events"]
    assert len(s["reconfigurations"]) == 3  # the start, after the rank, after the worker
