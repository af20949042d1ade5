"""Checkpoints under faults (issue 24): a checkpoint folder on a real, small tmpfs that fills
up after the first checkpoint. Real rank processes (gloo). With ``on_save_error`` stop every
rank ends with one line and exit status 3; with continue the run trains to the end without
saving; either way the checkpoint written before the disk filled stays the latest and loads.
Skipped, with the reason, where this machine cannot mount a tmpfs (not root, no CAP_SYS_ADMIN).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sailor_runtime.engine import start_local
from sailor_runtime.engine.checkpoints import checkpoint as ckpt
from sailor_runtime.engine.checkpoints.savefaults import FATAL_EXIT
from sailor_sim import Job, Plan, Replica, Stage

JOB = Job.create("tiny-gpt", 8, 32)
PLAN = Plan(
    (
        Stage(0, 3, (Replica("CPU", "local", 1, 2, 4),)),
        Stage(4, 7, (Replica("CPU", "local", 1, 2, 4),)),
    )
)


@pytest.fixture()
def small_disk(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(disk)], capture_output=True
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()[:200]}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def fill(disk: Path) -> None:
    """Write a ballast file until the tmpfs is full."""
    chunk = b"\0" * (1 << 20)
    with open(disk / "ballast", "wb") as f:
        try:
            while True:
                f.write(chunk)
                f.flush()
        except OSError:
            pass
        try:
            os.fsync(f.fileno())
        except OSError:
            pass


@pytest.mark.parametrize("policy", ["stop", "continue"])
def test_a_full_disk_keeps_the_last_checkpoint_and_does_what_the_user_chose(
    tmp_path, small_disk, policy
):
    root = small_disk / "ckpt"
    run = start_local(
        JOB, PLAN, steps=8, checkpoint_dir=root, checkpoint_every=2, log_dir=tmp_path,
        on_save_error=policy,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while ckpt.latest(root) is None:
            assert time.monotonic() < deadline and all(p.poll() is None for p in run.procs)
            time.sleep(0.02)
        fill(small_disk)  # the disk is full from the next save on (or the one in flight)
        codes = run.wait(timeout_s=180)
    finally:
        run.kill(9)
        for p in run.procs:
            p.wait()
    logs = [(tmp_path / f"rank{r}.log").read_text() for r in range(2)]
    said = [line for log in logs for line in log.splitlines() if "was not written" in line]
    assert any("No space left on device" in line for line in said), logs[0][-3000:]
    if policy == "stop":
        # every rank stops with status 3; the launcher kills the rest once one has exited
        assert FATAL_EXIT in codes and set(codes) <= {FATAL_EXIT, -9}, (codes, logs[0][-2000:])
        assert all(line.startswith("error: checkpoint_dir: checkpoint of step") for line in said)
        assert all("Traceback" not in log for log in logs), logs[0][-3000:]
    else:
        assert codes == [0, 0], (codes, logs[0][-2000:])
        assert len(said) == 1 and said[0].startswith("warning: ")
    path, _ = ckpt.latest(root)  # what was written before the disk filled is the latest,
    assert all(f"the last complete checkpoint is {path};" in line for line in said)
    assert ckpt.read_full(path)  # and it loads
    assert not list(root.glob("*.tmp"))  # the failed save's partial folder was removed


ENTRY = "from sailor_runtime.cli import entry; entry()"


def test_a_read_only_run_folder_is_refused_at_start(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)], capture_output=True
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here: {made.stderr.decode().strip()[:200]}")
    try:
        for args in (
            ["run", "--local", "--workers", "1", "--run-dir", str(folder)],
            ["controller", "--planner", "127.0.0.1:9", "--run-dir", str(folder)],
        ):
            start = time.monotonic()
            r = subprocess.run(
                [sys.executable, "-c", ENTRY, *args], capture_output=True, text=True, timeout=120
            )
            lines = r.stderr.strip().splitlines()
            assert r.returncode == 2, (args[0], r.stderr[-1000:])
            assert len(lines) == 1 and "--run-dir" in lines[0], lines
            assert "Read-only file system" in lines[0], lines
            assert time.monotonic() - start < 60  # before any profiling or planning
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)
