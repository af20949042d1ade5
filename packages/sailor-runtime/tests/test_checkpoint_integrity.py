"""A corrupted checkpoint is skipped, by name, for the next older one (issue 13, item 6).

A real engine process trains and checkpoints; a checkpoint file is then corrupted with its size
unchanged (or truncated), and a second real process resumes from the older checkpoint, says
which file it skipped, and finishes. The controller's view of the resume step agrees.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sailor_runtime.controller.checkpoints import latest_checkpoint_step
from sailor_runtime.engine.checkpoints import checkpoint as ckpt
from sailor_runtime.engine.checkpoints import integrity
from sailor_runtime.engine.config import TrainConfig
from sailor_sim import Job, Plan, Replica, Stage

JOB = Job.create("tiny-gpt", 4, 16)
PLAN = Plan((Stage(0, 7, (Replica("CPU", "local", 1, 1, 4),)),)).check(JOB)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train(tmp_path: Path, steps: int) -> subprocess.CompletedProcess:
    cfg = TrainConfig.for_job(
        job=JOB,
        plan=PLAN,
        steps=steps,
        checkpoint_dir=str(tmp_path / "ckpt"),
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
def test_a_damaged_checkpoint_is_skipped_for_the_older_one(tmp_path, damage):
    first = train(tmp_path, 4)
    assert first.returncode == 0, first.stderr[-2000:]
    newest = ckpt.step_dir(tmp_path / "ckpt", 4)
    manifest = json.loads((newest / "manifest.json").read_text())
    assert all(len(e["sha256"]) == 64 for e in manifest["files"].values())
    victim = newest / "__0_0.distcp"
    if damage == "same size":
        flip_bytes(victim)
    else:
        victim.write_bytes(victim.read_bytes()[:100])
    assert latest_checkpoint_step(tmp_path / "ckpt") == 2  # the controller agrees
    (tmp_path / "metrics.jsonl").unlink()
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
