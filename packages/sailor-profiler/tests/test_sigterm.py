"""SIGTERM during a measurement stops the ranks it started: nothing the command started lives
soon after, and the exit status is 128 + SIGTERM. Python's default handler
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


def _processes() -> dict[int, tuple[int, int]]:
    """Live processes (zombies excluded): pid -> (parent pid, process group)."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            out[int(entry.name)] = (int(fields[1]), int(fields[2]))
    return out


def _family(pid: int) -> set[int]:
    """``pid``, its live descendants (torchrun starts its ranks in sessions of their own) and
    the rest of its process group."""
    live = _processes()
    found = {p for p, (_parent, group) in live.items() if group == pid} | ({pid} & live.keys())
    grew = True
    while grew:
        more = {p for p, (parent, _group) in live.items() if parent in found} - found
        found |= more
        grew = bool(more)
    return found


NETWORK = ["network", "--reps", "1000", "--max-bytes", "1G"]
"""A measurement that runs for minutes: the signal comes mid-collective."""


def _start(command: list[str], err: Path) -> subprocess.Popen:
    """``command`` in its own process group, its stderr into ``err``."""
    with open(err, "wb") as sink:
        return subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=sink, start_new_session=True
        )


def _wait_measuring(proc: subprocess.Popen, err: Path) -> None:
    """Until the ranks are past their rendezvous and measure (rank 0's progress line)."""
    deadline = time.monotonic() + 90
    while b"network: measuring" not in err.read_bytes():
        assert proc.poll() is None, err.read_text()[-3000:]
        assert time.monotonic() < deadline, "the ranks never started measuring"
        time.sleep(0.2)
    time.sleep(1.0)  # mid-collective


def _signal_once_measuring(proc: subprocess.Popen, err: Path) -> set[int]:
    """SIGTERM ``proc`` once its ranks measure; its family as it was then."""
    _wait_measuring(proc, err)
    family = _family(proc.pid)
    proc.send_signal(signal.SIGTERM)
    return family


def _left(family: set[int], pgid: int) -> set[int]:
    """Who of ``family`` (or of group ``pgid``) still lives 15 s after the signal's answer."""
    deadline = time.monotonic() + 15
    while True:
        live = _processes()
        left = {p for p in family if p in live} | {p for p, v in live.items() if v[1] == pgid}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def test_sigterm_mid_measurement_leaves_no_process_behind(tmp_path):
    proc = _start([SCRIPT, *NETWORK, "--out", str(tmp_path / "n")], tmp_path / "err")
    try:  # itself, the forkserver, two ranks (+ the resource tracker)
        family = _signal_once_measuring(proc, tmp_path / "err")
        proc.wait(timeout=60)
        err = (tmp_path / "err").read_text()
        assert proc.returncode == 128 + signal.SIGTERM, err
        assert len(family) >= 4, family  # it had started its ranks
        assert not _left(family, proc.pid), "processes left behind after SIGTERM"
        assert "Traceback" not in err and "leaked" not in err, err
    finally:
        _kill_family(proc.pid)


TORCHRUN_GRACE_S = 30
"""torchrun's wait between its SIGTERM to the ranks and its SIGKILL
(torch.distributed.elastic.multiprocessing.api: ``close(death_sig, timeout=30)``)."""


def test_sigterm_to_torchrun_stops_its_ranks(tmp_path):
    """Under an external launcher (torchrun, as Slurm's scancel or a Kubernetes pod stop
    signals it) the launcher forwards SIGTERM to each rank, whose command stops mid-collective
    (``inputs.Terminated``) and exits: nothing torchrun started outlives it. (torchrun's own
    traceback on the signal is torchrun's.)"""
    torchrun = str(Path(sys.executable).parent / "torchrun")
    command = [torchrun, "--nnodes", "1", "--nproc-per-node", "2", "-m", "sailor_profiler.cli"]
    proc = _start([*command, *NETWORK, "--out", str(tmp_path / "n")], tmp_path / "err")
    try:  # torchrun and its two ranks
        family = _signal_once_measuring(proc, tmp_path / "err")
        signalled = time.monotonic()
        proc.wait(timeout=60)
        err = (tmp_path / "err").read_text()
        # torchrun SIGKILLs ranks still there 30 s after its SIGTERM: they must stop before
        took = time.monotonic() - signalled
        assert took < TORCHRUN_GRACE_S - 10, f"ranks took {took:.0f} s to stop: {err[-2000:]}"
        assert proc.returncode != 0, err
        assert len(family) >= 3, family  # torchrun and its ranks
        assert not _left(family, proc.pid), "processes left behind after SIGTERM"
        assert "leaked" not in err and "please report it" not in err, err
    finally:
        _kill_family(proc.pid)


def _kill_family(pid: int) -> None:
    """SIGKILL ``pid``, its descendants and its group (a failed test leaves nothing behind:
    torchrun's ranks live in sessions of their own, so its group alone is not enough)."""
    for p in sorted(_family(pid), key=lambda p: p == pid):  # ranks before their launcher
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_rank_that_loses_its_peer_says_so_in_one_line(tmp_path):
    """One rank of a torchrun group killed outright (a lost node): the survivor's collective
    fails with gloo's 'Connection reset by peer', which it reports as a lost peer (one line,
    exit 2), not as an internal error to report. torchrun looks at its ranks every 20 s here:
    at its default it would SIGTERM the survivor before the survivor's collective failed."""
    torchrun = [str(Path(sys.executable).parent / "torchrun"), "--monitor-interval", "20"]
    command = [*torchrun, "--nnodes", "1", "--nproc-per-node", "2", "-m", "sailor_profiler.cli"]
    proc = _start([*command, *NETWORK, "--out", str(tmp_path / "n")], tmp_path / "err")
    try:
        _wait_measuring(proc, tmp_path / "err")
        os.kill(_rank(proc.pid, 1), signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        _kill_family(proc.pid)
    err = (tmp_path / "err").read_text()
    said = [line for line in err.splitlines() if line.startswith("error: ")]
    assert said, err[-3000:]
    assert all("please report it" not in line for line in said), said
    assert any("rank 0 of 2 lost its peers mid-measurement" in line for line in said), said


def _rank(launcher: int, rank: int) -> int:
    """The pid of ``launcher``'s rank ``rank`` (its RANK environment variable)."""
    for pid in _family(launcher) - {launcher}:
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in env:
            return pid
    raise AssertionError(f"no rank {rank} under {launcher}")
