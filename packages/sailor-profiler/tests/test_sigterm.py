"""SIGTERM during a measurement stops the ranks it started: the console script's process
group is empty soon after, and the exit status is 128 + SIGTERM. Python's default handler
died at once and left the ranks (mid-collective), the forkserver and the resource tracker
running as orphans."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = str(Path(sys.executable).parent / "sailor-profiler")


def _group(pgid: int) -> list[int]:
    """Live processes of process group ``pgid`` (zombies excluded)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(int(entry.name))
    return out


def test_sigterm_mid_measurement_leaves_no_process_behind(tmp_path):
    proc = subprocess.Popen(
        [SCRIPT, "network", "--out", str(tmp_path / "net"), "--reps", "1000", "--max-bytes", "1G"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group: what it started is found by pgid
    )
    try:
        deadline = time.monotonic() + 60
        while len(_group(proc.pid)) < 4:  # itself, the forkserver, two ranks (+ tracker)
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the ranks never started"
            time.sleep(0.2)
        time.sleep(1.0)  # the ranks are measuring
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
        assert proc.returncode == 128 + signal.SIGTERM, err
        deadline = time.monotonic() + 15
        while _group(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _group(proc.pid) == [], "processes left behind after SIGTERM"
        assert b"Traceback" not in err and b"leaked" not in err, err
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
