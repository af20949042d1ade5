"""A run folder belongs to one run: a lock file, the job's fingerprint, the last generation.

``run.lock`` holds the run id, the fingerprint of what the checkpoints depend on (the job, the
seed, the learning rate) and the controller's pid. The controller holds an exclusive ``flock``
on it while it lives, so a second controller on the same folder refuses to start; a later
controller with the same job resumes there, one with another job refuses (its checkpoints would
be the wrong weights). ``generation`` holds the last generation assigned, so generation numbers
keep growing across controller restarts (agents refuse an older one).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import secrets
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import grpc

from sailor_sim import Job

from ..durable import durable_write
from ..errors import SailorRuntimeError

LOCK_FILE = "run.lock"
GENERATION_FILE = "generation"
MAX_GENERATION = 2**63 - 1
"""Generations travel as uint64 but torch and the agents use signed 64-bit integers."""


class RunDirError(SailorRuntimeError):
    """A run folder owned by another run, or in use by another controller."""

    code = grpc.StatusCode.FAILED_PRECONDITION


def job_fingerprint(job: Job, seed: int, lr: float) -> str:
    """What a checkpoint depends on: the same fingerprint can resume the run's checkpoints."""
    doc = json.dumps({"job": job.to_dict(), "seed": seed, "lr": lr}, sort_keys=True)
    return hashlib.sha256(doc.encode()).hexdigest()[:16]


@dataclass
class RunLock:
    """The held lock of a run folder (release with ``release``)."""

    path: Path
    run_id: str
    fingerprint: str
    resumed: bool
    _fd: int

    def release(self) -> None:
        if self._fd >= 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1


def acquire(run_dir: Path, job: Job, seed: int, lr: float) -> RunLock:
    """Lock ``run_dir`` for this run; RunDirError when another controller holds it or the
    folder belongs to another job."""
    if run_dir.exists() and not run_dir.is_dir():
        raise RunDirError(f"{run_dir} is a file; give a folder", field="run_dir")
    path = run_dir / LOCK_FILE
    try:  # a read-only folder is refused here, before anything trains into it
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        _probe_writable(run_dir)
    except OSError as exc:
        raise RunDirError(
            f"cannot write in {run_dir} ({exc.strerror}); checkpoints need a writable folder",
            field="run_dir",
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        owner = _read(fd)
        os.close(fd)
        raise RunDirError(
            f"{run_dir} is in use by run {owner.get('run_id', '?')} (controller pid "
            f"{owner.get('pid', '?')} on {owner.get('host', '?')}); use another --run-dir",
            field="run_dir",
        ) from None
    previous = _read(fd)
    fingerprint = job_fingerprint(job, seed, lr)
    if previous and previous.get("fingerprint") != fingerprint:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        raise RunDirError(
            f"{run_dir} belongs to run {previous.get('run_id', '?')} of another job "
            f"({previous.get('describe', '?')}); this job ({_describe(job, seed, lr)}) would "
            "resume from its checkpoints. Use another --run-dir, or the same job to resume",
            field="run_dir",
        )
    run_id = previous.get("run_id") or secrets.token_hex(8)
    record = {
        "run_id": run_id,
        "fingerprint": fingerprint,
        "describe": _describe(job, seed, lr),
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "locked_at": time.time(),
    }
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(record).encode(), 0)
    os.fsync(fd)
    return RunLock(path, run_id, fingerprint, bool(previous), fd)


def _probe_writable(run_dir: Path) -> None:
    """Create and remove a file (an existing lock file opens even on a read-only mount)."""
    probe = run_dir / f".probe-{os.getpid()}"
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.close(fd)
    os.unlink(probe)


def _describe(job: Job, seed: int, lr: float) -> str:
    return f"{job.model.name}, global batch {job.global_batch_size}, seed {seed}, lr {lr}"


def _read(fd: int) -> dict:
    try:
        raw = os.pread(fd, 1 << 16, 0)
        data = json.loads(raw) if raw.strip() else {}
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def last_generation(run_dir: Path) -> int:
    """The last generation assigned in this folder (0 = none, or unreadable)."""
    try:
        value = int((run_dir / GENERATION_FILE).read_text().strip() or 0)
    except (OSError, ValueError):
        return 0
    return value if 0 <= value <= MAX_GENERATION else 0


def save_generation(run_dir: Path, generation: int) -> None:
    """Record ``generation`` before it is assigned (atomically: write, fsync, rename)."""
    if not 0 < generation <= MAX_GENERATION:
        raise RunDirError(f"generation {generation} is out of 1..2^63-1", field="generation")
    durable_write(run_dir / GENERATION_FILE, str(generation).encode(),
                  run_dir / f".{GENERATION_FILE}.tmp")  # fmt: skip
