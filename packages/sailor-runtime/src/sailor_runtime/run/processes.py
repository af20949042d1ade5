"""Local worker agents as child processes (`sailor worker ...`), for `sailor run --local`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


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
) -> LocalWorker:
    log_dir = run_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    cmd = [
        sys.executable, "-m", "sailor_runtime.cli", "worker",
        "--controller", controller, "--gpu-type", gpu_type, "--gpus", str(gpus),
        "--zone", zone, "--worker-id", name, "--workdir", str(run_dir / "workers"),
        "--threads-per-rank", str(threads_per_rank), "--warm" if warm else "--cold",
    ]  # fmt: skip
    env = dict(os.environ)
    if token:
        env["SAILOR_TOKEN"] = token
    with open(log_path, "wb") as log:
        popen = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )
    return LocalWorker(name, gpu_type, popen, log_path)
