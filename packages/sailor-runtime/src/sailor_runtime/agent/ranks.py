"""Start, watch and stop the rank processes of one node.

Each rank runs the engine's entry point (``sailor_runtime.engine.worker``) in its own process
with its own log and metrics file. Warm (the default): the agent's zygote (``agent.zygote``), a
process that imported torch and the engine once, forks each rank in milliseconds, and nothing
imports torch while ranks train. Cold: each rank is a fresh ``python -m
sailor_runtime.agent.zygote --once`` that imports torch itself. Either way a rank dies with its
node (PR_SET_PDEATHSIG down the chain agent -> zygote -> rank). Processes are spawned from one
long-lived thread because Linux ties the death signal to the spawning thread. (No
``preexec_fn``: Python code between fork and exec in a process with gRPC threads can crash.)
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .assignment import ValidAssignment
from .zygote import AGENT_PID_ENV, ForkedRank, Zygote, ZygoteError, start_cold

log = logging.getLogger("sailor.agent")

RUNNING, SUCCEEDED, FAILED, STOPPED = "running", "succeeded", "failed", "stopped"


@dataclass
class RankProcess:
    generation: int
    rank: int
    popen: subprocess.Popen | ForkedRank
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


MEMORY_PROBE_STEP = 3
"""The step of a generation whose tensor memory every rank measures (engine.memprobe): after
the first steps, so the optimizer states exist and allocations are steady."""


@dataclass
class RankRunner:
    """The rank processes of this node, across generations."""

    workdir: Path
    threads_per_rank: int = 1
    rank_env: dict[str, str] = field(default_factory=dict)
    """Set in every rank (a CPU worker type's threads and cores, ``agent.cputypes``)."""
    warm: bool = False
    """Fork ranks from a zygote with torch imported (fast restarts); else start them cold."""
    procs: list[RankProcess] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._forker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rank-forker")
        self._zygote: Zygote | None = None
        self._closed = False
        if self.warm:
            self._forker.submit(self._ensure_zygote)

    def _base_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["OMP_NUM_THREADS"] = str(self.threads_per_rank)
        # OpenMP reads its environment when torch loads, i.e. in the zygote, before a fork:
        # the worker type's settings (OMP_WAIT_POLICY) must be there already
        env.update(self.rank_env)
        env["PYTHONUNBUFFERED"] = "1"
        env[AGENT_PID_ENV] = str(os.getpid())
        return env

    def _ensure_zygote(self) -> None:
        """Start a zygote if there is none or it died (runs on the forker thread)."""
        if not self._closed and (self._zygote is None or not self._zygote.alive):
            self._zygote = Zygote(self._base_env())

    def wait_warm(self, timeout_s: float = 300.0) -> bool:
        """Block until the zygote has imported torch and the engine (or timeout)."""
        if not self.warm:
            return True
        self._forker.submit(lambda: None).result()  # the zygote has been started
        return self._zygote is not None and self._zygote.wait_ready(timeout_s)

    def _launch(self, argv: list[str], env: dict[str, str], log_path: Path):
        """Fork the rank from the zygote; start it cold when there is none (or it died)."""
        if self._zygote is not None:
            try:
                return self._zygote.fork(argv, env, str(log_path))
            except ZygoteError as exc:
                log.warning("%s; starting the rank cold and a new zygote", exc)
                self._forker.submit(self._ensure_zygote)  # runs after this spawn
        return start_cold(argv, env, str(log_path), self._base_env())

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
            # tensor memory of each rank, measured once per generation (a step's worth of
            # profiler overhead) for the predicted-vs-measured report of `sailor run`
            "--memory-probe-step", str(MEMORY_PROBE_STEP),
        ]  # fmt: skip
        if a.lr > 0:
            cmd += ["--lr", repr(a.lr)]
        if a.execution_options:
            cmd += ["--options", str(gen_dir / "options.json")]
        return cmd

    def _spawn(self, a: ValidAssignment) -> list[RankProcess]:
        gen_dir = self.workdir / f"gen-{a.generation}"
        gen_dir.mkdir(parents=True, exist_ok=True)
        (gen_dir / "job.json").write_text(json.dumps(a.job.to_dict()))
        (gen_dir / "plan.json").write_text(a.plan.to_json())
        (gen_dir / "options.json").write_text(json.dumps(a.execution_options))
        started = []
        for rank, device in a.ranks:
            log_path = gen_dir / f"rank-{rank}.log"
            argv = self.rank_args(a, rank, gen_dir)
            popen = self._launch(
                argv, {**self.rank_env, "CUDA_VISIBLE_DEVICES": str(device)}, log_path
            )
            metrics = gen_dir / f"rank-{rank}.metrics.jsonl"
            started.append(RankProcess(a.generation, rank, popen, log_path, metrics))
        return started

    def start(self, a: ValidAssignment) -> int:
        """Stop every older rank, then start the ranks of ``a``; returns how many started."""
        self.stop(generation=0, grace_s=1.0)
        started = self._forker.submit(self._spawn, a).result()
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
        zygote = self._forker.submit(lambda: self._zygote).result()
        if zygote is not None:
            zygote.close()
        self._forker.shutdown(wait=False)

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
