"""Local worker agents as child processes (`sailor worker ...`), for `sailor run --local`."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import SailorRuntimeError


@dataclass
class LocalWorker:
    name: str
    gpu_type: str
    popen: subprocess.Popen
    log_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def kill(self) -> None:
        """kill -9: the node dies without a word (its ranks die with it, see agent.ranks)."""
        try:
            os.kill(self.popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.popen.wait()

    def terminate(self, timeout_s: float = 10.0) -> None:
        if self.popen.poll() is not None:
            return
        self.popen.terminate()
        try:
            self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()


def start_worker(
    name: str,
    controller: str,
    gpu_type: str,
    zone: str,
    run_dir: Path,
    *,
    gpus: int = 1,
    token: str | None = None,
    threads_per_rank: int = 1,
    warm: bool = True,
    first_core: int = 0,
    cuda_devices: str | None = None,
) -> LocalWorker:
    """``cuda_devices``: the worker's CUDA_VISIBLE_DEVICES (its GPUs of this machine); its
    agent gives each rank the entry of its local device."""
    log_dir = run_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    cmd = [
        sys.executable, "-m", "sailor_runtime.cli", "worker",
        "--controller", controller, "--gpu-type", gpu_type, "--gpus", str(gpus),
        "--zone", zone, "--worker-id", name, "--workdir", str(run_dir / "workers"),
        "--threads-per-rank", str(threads_per_rank), "--warm" if warm else "--cold",
        "--first-core", str(first_core),
    ]  # fmt: skip
    env = dict(os.environ)
    if cuda_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = cuda_devices
    if token:
        env["SAILOR_TOKEN"] = token
    with open(log_path, "wb") as log:
        popen = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )
    return LocalWorker(name, gpu_type, popen, log_path)


@dataclass
class PlannerProcess:
    """`sailor-planner serve` as a child process (its own interpreter: a search never holds
    the controller's GIL)."""

    popen: subprocess.Popen
    address: str

    def close(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


def start_planner(run_dir: Path, timeout_s: float = 120.0) -> PlannerProcess:
    """Start the planner server on 127.0.0.1 (a free port) and wait for its address."""
    log_dir = run_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "sailor_planner.cli", "serve", "--host", "127.0.0.1"]
    popen = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=open(log_dir / "planner.log", "wb"),  # noqa: SIM115 - the child owns it
        stdin=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([popen.stdout], [], [], 0.5)
        if ready:
            line = popen.stdout.readline().decode(errors="replace")
            m = re.search(r"on (127\.0\.0\.1:\d+)", line)
            if m:
                return PlannerProcess(popen, m.group(1))
        if popen.poll() is not None:
            break
    popen.kill()
    raise SailorRuntimeError(
        f"the planner server did not start; see {log_dir / 'planner.log'}", field="planner"
    )
