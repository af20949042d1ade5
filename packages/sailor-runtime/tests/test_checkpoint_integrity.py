"""A corrupted checkpoint is skipped, by name, for the next older one (issue 13, item 6).

A real engine process trains and checkpoints; a checkpoint file is then corrupted with its size
unchanged (or truncated), and a second real process resumes from the older checkpoint, says
which file it skipped, and finishes. The controller's view of the resume step agrees.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sailor_runtime.controller.checkpoints import latest_checkpoint_step
from sailor_runtime.engine.checkpoints import checkpoint as ckpt
from sailor_runtime.engine.checkpoints import integrity
from sailor_runtime.engine.config import TrainConfig
from sailor_sim import Job, Plan, Replica, Stage
from sailor_testing import free_port

JOB = Job.create("tiny-gpt", 4, 16)
PLAN = Plan((Stage(0, 7, (Replica("CPU", "local", 1, 1, 4),)),)).check(JOB)


def train(tmp_path: Path, steps: int, checkpoints: Path | None = None):
    cfg = TrainConfig.for_job(
        job=JOB,
        plan=PLAN,
        steps=steps,
        checkpoint_dir=str(checkpoints or tmp_path / "ckpt"),
        checkpoint_every=2,
        metrics_path=str(tmp_path / "metrics.jsonl"),
        master_port=free_port(),
    )
    return subprocess.run(
        [sys.executable, "-m", "sailor_runtime.engine.worker", str(cfg.write(tmp_path / "t.json"))],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "RANK": "0"},
    )


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """Checkpoints at steps 2 and 4, written by one real engine process; each test damages
    its own copy (``checkpoints_at``)."""
    folder = tmp_path_factory.mktemp("trained")
    first = train(folder, 4)
    assert first.returncode == 0, first.stderr[-2000:]
    return folder / "ckpt"


def checkpoints_at(trained: Path, where: Path) -> Path:
    """A copy of the engine's checkpoints at ``where`` (its parents made)."""
    where.parent.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copytree(trained, where))


def steps_run(tmp_path: Path) -> list[int]:
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["step"] for line in lines if line.strip()]


def flip_bytes(path: Path) -> None:
    """Corrupt the middle of a file, keeping its size."""
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    data[mid : mid + 64] = bytes(b ^ 0xFF for b in data[mid : mid + 64])
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["same size", "truncated"])
def test_a_damaged_checkpoint_is_skipped_for_the_older_one(tmp_path, damage, trained):
    checkpoints_at(trained, tmp_path / "ckpt")
    newest = ckpt.step_dir(tmp_path / "ckpt", 4)
    manifest = json.loads((newest / "manifest.json").read_text())
    assert all(len(e["sha256"]) == 64 for e in manifest["files"].values())
    victim = newest / "__0_0.distcp"
    if damage == "same size":
        flip_bytes(victim)
    else:
        victim.write_bytes(victim.read_bytes()[:100])
    assert latest_checkpoint_step(tmp_path / "ckpt") == 2  # the controller agrees
    second = train(tmp_path, 6)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "__0_0.distcp" in second.stderr and "skipped" in second.stderr, second.stderr[-2000:]
    assert steps_run(tmp_path) == [3, 4, 5, 6]  # resumed after step 2, nothing lost


def test_verify_names_the_file_at_fault(tmp_path):
    (tmp_path / "a.pt").write_bytes(b"abc" * 100)
    files = {"a.pt": integrity.describe(tmp_path / "a.pt")}
    assert integrity.verify(tmp_path, files) is None
    flip_bytes(tmp_path / "a.pt")
    assert "a.pt" in integrity.verify(tmp_path, files)
    assert "missing" in integrity.verify(tmp_path, {"../x": 3})
    assert "malformed" in integrity.verify(tmp_path, {"a.pt": {"sha256": 1}})


def sailor_run(run_dir: Path, steps: int) -> subprocess.CompletedProcess:
    """`sailor run --local` on ``run_dir`` (a rerun: it must decide before starting anything)."""
    cmd = [sys.executable, "-m", "sailor_runtime.cli", "run", "--local", "--workers", "1",
           "--no-profile", "--steps", str(steps), "--run-dir", str(run_dir),
           "--timeout", "60"]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_a_rerun_with_nothing_to_train_or_only_damaged_checkpoints_says_so(tmp_path, trained):
    """Checkpoints at steps 2 and 4, written by the real engine into a run folder."""
    run_dir = tmp_path / "run"
    checkpoints_at(trained, run_dir / "checkpoints")
    # --steps below the checkpoint: one line, exit 0, and no 0/3-steps summary.
    done = sailor_run(run_dir, 3)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "checkpoint in" in done.stderr and "at step 4, already past --steps 3" in done.stderr
    assert "run DONE" not in done.stdout and "error -100%" not in done.stdout
    # Every checkpoint damaged: one warning each (a broken manifest, a changed .distcp file),
    # then a refusal naming the folder and the fix; never a silent restart from step 0.
    (ckpt.step_dir(run_dir / "checkpoints", 2) / "manifest.json").write_text("{garbage")
    flip_bytes(ckpt.step_dir(run_dir / "checkpoints", 4) / "__0_0.distcp")
    refused = sailor_run(run_dir, 8)
    assert refused.returncode == 2, refused.stdout[-2000:] + refused.stderr[-2000:]
    warnings = [line for line in refused.stderr.splitlines() if "skipped" in line]
    assert len(warnings) == 2, refused.stderr[-2000:]
    assert "step_00000002" in warnings[1] and "manifest.json" in warnings[1]
    assert "step_00000004" in warnings[0] and "__0_0.distcp" in warnings[0]
    error = refused.stderr.strip().splitlines()[-1]
    assert error.startswith("error: ") and str(run_dir / "checkpoints") in error, error
    assert "move them away" in error and "resumed-after" not in refused.stdout
