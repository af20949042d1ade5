"""Start, watch and stop the rank processes of one node.

Each rank runs the engine's entry point (``sailor_runtime.engine.worker``) in a child process
with its own log and metrics file. Children are started through ``agent.warm``, which first
sets PR_SET_PDEATHSIG(SIGKILL), so that a node whose agent dies (kill -9) loses its ranks too,
as a real node failure would. Processes are spawned from
one long-lived thread because Linux ties the death signal to the spawning thread. (No
``preexec_fn``: Python code between fork and exec in a process with gRPC threads can crash.)

Restarting a rank should not pay for importing torch again: the runner keeps one warm process
per device with torch and the engine imported, hands it the rank's arguments when an
assignment arrives, and starts a new warm one in the background.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .assignment import ValidAssignment

RUNNING, SUCCEEDED, FAILED, STOPPED = "running", "succeeded", "failed", "stopped"

AGENT_PID_ENV = "SAILOR_AGENT_PID"


@dataclass
class RankProcess:
    generation: int
    rank: int
    popen: subprocess.Popen
    log_path: Path
    metrics_path: Path
    metrics_offset: int = 0
    stopped: bool = False
    partial: bytes = b""

    def state(self) -> tuple[str, int]:
        code = self.popen.poll()
        if code is None:
            return RUNNING, 0
        if self.stopped:
            return STOPPED, code
        return (SUCCEEDED if code == 0 else FAILED), code

    def log_tail(self, lines: int = 15) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(deque(f, maxlen=lines))
        except OSError:
            return ""


@dataclass
class RankRunner:
    """The rank processes of this node, across generations."""

    workdir: Path
    threads_per_rank: int = 1
    warm_spares: int = 0
    """Warm processes to keep ready (one per device; 0 = start ranks cold)."""
    procs: list[RankProcess] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._forker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rank-forker")
        self._spares: list[subprocess.Popen] = []
        self._closed = False
        if self.warm_spares:
            self._forker.submit(self._refill)

    def _base_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["OMP_NUM_THREADS"] = str(self.threads_per_rank)
        env["PYTHONUNBUFFERED"] = "1"
        env[AGENT_PID_ENV] = str(os.getpid())
        return env

    def _new_process(self) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "sailor_runtime.agent.warm"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=self._base_env(),
        )

    def _refill(self) -> None:
        """Top the warm processes up (runs on the forker thread)."""
        self._spares = [p for p in self._spares if p.poll() is None]
        while not self._closed and len(self._spares) < self.warm_spares:
            self._spares.append(self._new_process())

    def wait_warm(self, timeout_s: float = 300.0) -> bool:
        """Block until every warm process has imported torch and the engine (or timeout)."""
        if not self.warm_spares:
            return True
        self._forker.submit(lambda: None).result()  # the first refill has run
        deadline = time.monotonic() + timeout_s
        for spare in list(self._spares):
            ready, _, _ = select.select([spare.stdout], [], [], max(0, deadline - time.monotonic()))
            if not ready or spare.stdout.readline().strip() != b"ready":
                return False
        return True

    def _launch(self, argv: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen:
        """Hand the command to a warm process (a fresh one when none is left)."""
        line = (json.dumps({"argv": argv, "env": env, "log": str(log_path)}) + "\n").encode()
        while True:
            proc = self._spares.pop(0) if self._spares else self._new_process()
            if proc.poll() is not None:
                continue
            try:
                proc.stdin.write(line)
                proc.stdin.close()
                return proc
            except OSError:
                proc.kill()

    # ---- commands ----------------------------------------------------------------------------
    def rank_args(self, a: ValidAssignment, rank: int, gen_dir: Path) -> list[str]:
        """The engine's command-line arguments for ``rank``."""
        job_path, plan_path = gen_dir / "job.json", gen_dir / "plan.json"
        cmd = [
            "--job", str(job_path), "--plan", str(plan_path),
            "--rank", str(rank), "--world-size", str(a.world_size),
            "--master-addr", a.master_addr, "--master-port", str(a.master_port),
            "--store-prefix", a.store_prefix, "--store-is-external",
            "--checkpoint-dir", a.checkpoint_dir,
            "--steps", str(a.steps), "--checkpoint-every", str(a.checkpoint_every),
            "--metrics", str(gen_dir / f"rank-{rank}.metrics.jsonl"),
            "--seed", str(a.seed), "--backend", a.backend,
        ]  # fmt: skip
        if a.lr > 0:
            cmd += ["--lr", repr(a.lr)]
        return cmd

    def _spawn(self, a: ValidAssignment) -> list[RankProcess]:
        gen_dir = self.workdir / f"gen-{a.generation}"
        gen_dir.mkdir(parents=True, exist_ok=True)
        (gen_dir / "job.json").write_text(json.dumps(a.job.to_dict()))
        (gen_dir / "plan.json").write_text(a.plan.to_json())
        started = []
        for rank, device in a.ranks:
            log_path = gen_dir / f"rank-{rank}.log"
            argv = self.rank_args(a, rank, gen_dir)
            popen = self._launch(argv, {"CUDA_VISIBLE_DEVICES": str(device)}, log_path)
            metrics = gen_dir / f"rank-{rank}.metrics.jsonl"
            started.append(RankProcess(a.generation, rank, popen, log_path, metrics))
        return started

    def start(self, a: ValidAssignment) -> int:
        """Stop every older rank, then start the ranks of ``a``; returns how many started."""
        self.stop(generation=0, grace_s=1.0)
        started = self._forker.submit(self._spawn, a).result()
        if self.warm_spares:
            self._forker.submit(self._refill)  # in the background: the ranks start now
        with self._lock:
            self.procs = [p for p in self.procs if p.popen.poll() is None] + started
        return len(started)

    def stop(self, generation: int = 0, grace_s: float = 1.0) -> int:
        """SIGTERM the ranks of ``generation`` (0 = all), SIGKILL after ``grace_s``."""
        with self._lock:
            targets = [
                p for p in self.procs if p.popen.poll() is None and generation in (0, p.generation)
            ]
            for p in targets:
                p.stopped = True
                _signal(p.popen, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for p in targets:
            try:
                p.popen.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal(p.popen, signal.SIGKILL)
                p.popen.wait()
        return len(targets)

    def shutdown(self) -> None:
        self._closed = True
        self.stop(0, grace_s=1.0)
        self._forker.submit(self._close_spares).result()
        self._forker.shutdown(wait=False)

    def _close_spares(self) -> None:
        for spare in self._spares:
            try:
                spare.stdin.close()  # EOF: the warm process exits
            except OSError:
                pass
        for spare in self._spares:
            try:
                spare.wait(5)
            except subprocess.TimeoutExpired:
                spare.kill()
        self._spares = []

    # ---- observation -------------------------------------------------------------------------
    def current_generation(self) -> int:
        with self._lock:
            return max((p.generation for p in self.procs), default=0)

    def statuses(self) -> list[tuple[RankProcess, str, int]]:
        with self._lock:
            procs = list(self.procs)
        return [(p, *p.state()) for p in procs]

    def new_metrics(self) -> list[tuple[RankProcess, dict]]:
        """Complete JSON lines appended to each rank's metrics file since the last call."""
        out: list[tuple[RankProcess, dict]] = []
        with self._lock:
            procs = list(self.procs)
        for p in procs:
            try:
                with open(p.metrics_path, "rb") as f:
                    f.seek(p.metrics_offset)
                    data = f.read()
            except OSError:
                continue
            p.metrics_offset += len(data)
            lines = (p.partial + data).split(b"\n")
            p.partial = lines.pop()
            for line in lines:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict) and "step" in record:
                    out.append((p, record))
        return out


def _signal(popen: subprocess.Popen, sig: int) -> None:
    try:
        popen.send_signal(sig)
    except ProcessLookupError:
        pass
