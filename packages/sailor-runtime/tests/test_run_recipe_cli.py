"""`sailor run` refuses a bad recipe or data folder with one line and exit 2, before starting
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
        ('schedule = "step"\n', "schedule: must be one of"),
        ("lr = 1e-3\nwarmup = 3\n", "warmup: unknown key"),
        ("clip_norm = -1\n", "clip_norm: must be >= 0"),
    ],
)
def test_bad_recipe_file(tmp_path, toml, message):
    path = tmp_path / "recipe.toml"
    path.write_text(toml)
    proc = _run("--config", str(path))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and str(path) in lines[0]


def test_bad_flags_and_data(tmp_path):
    proc = _run("--no-decay", "norm,weights")
    assert proc.returncode == 2 and "flags.no_decay: must be a subset of" in proc.stderr
    proc = _run("--data", str(tmp_path))
    assert proc.returncode == 2 and proc.stderr.startswith("error: --data: cannot read")
    proc = _run("--eval-every", "5")
    assert proc.returncode == 2 and "--eval-every: needs --data" in proc.stderr


def test_controller_takes_the_same_recipe_and_data_flags(tmp_path):
    code = "from sailor_runtime.cli import app; app()"
    base = [sys.executable, "-c", code, "controller", "--planner", "127.0.0.1:9",
            "--run-dir", str(tmp_path / "run"), "--quiet"]  # fmt: skip
    bad = tmp_path / "r.toml"
    bad.write_text("clip_norm = -1\n")
    for extra, message in (
        (["--config", str(bad)], "clip_norm: must be >= 0"),
        (["--data", str(tmp_path)], "--data: cannot read"),
        (["--eval-every", "2"], "--eval-every: needs --data"),
    ):
        proc = subprocess.run(base + extra, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
