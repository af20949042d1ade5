"""`sailor run` and `sailor controller` refuse a bad run file (RunSpec's fields, the recipe as
its `[recipe]` table), flag or data folder with one line and exit 2, before starting
anything."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _run(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "sailor_runtime.cli", "run", "--local", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "toml, message",
    [
        ('[recipe]\nschedule = "step"\n', "schedule: must be one of"),
        ("[recipe]\nlr = 1e-3\nwarmup = 3\n", "unknown field(s) ['warmup']"),
        ("[recipe]\nclip_norm = -1\n", "clip_norm: must be >= 0"),
        ("seed = 3\nsteps = 0\n", "steps: must be >= 1"),
        ("lr = 1e-3\n", "unknown field(s) ['lr']"),
    ],
)
def test_bad_run_file(tmp_path, toml, message):
    path = tmp_path / "run.toml"
    path.write_text(toml)
    proc = _run("--config", str(path))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and path.name in lines[0], lines


def test_bad_flags_and_data(tmp_path):
    proc = _run("--no-decay", "norm,weights")
    assert proc.returncode == 2 and "--no-decay (no_decay): must be a subset of" in proc.stderr
    proc = _run("--zero", "zero9")
    assert proc.returncode == 2 and "zero" in proc.stderr and len(proc.stderr.splitlines()) == 1
    proc = _run("--fp8", "delayed")
    assert proc.returncode == 2 and "fp8: delayed is simulated, not run" in proc.stderr
    proc = _run("--data", str(tmp_path))
    assert proc.returncode == 2 and proc.stderr.startswith("error: --data: cannot read")
    proc = _run("--eval-every", "5")
    assert proc.returncode == 2 and "--eval-every: needs --data" in proc.stderr


def test_controller_takes_the_same_run_file_and_data_flags(tmp_path):
    code = "from sailor_runtime.cli import entry; entry()"
    base = [sys.executable, "-c", code, "controller", "--planner", "127.0.0.1:9",
            "--run-dir", str(tmp_path / "run"), "--quiet"]  # fmt: skip
    bad = tmp_path / "r.toml"
    bad.write_text("[recipe]\nclip_norm = -1\n")
    for extra, message in (
        (["--config", str(bad)], "clip_norm: must be >= 0"),
        (["--recompute", "fully"], "recompute"),
        (["--data", str(tmp_path)], "--data: cannot read"),
        (["--eval-every", "2"], "--eval-every: needs --data"),
    ):
        proc = subprocess.run(base + extra, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
