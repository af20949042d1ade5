"""Start, watch and stop the rank processes of one node.

Each rank runs the engine's entry point (``sailor_runtime.engine.worker``) on the generation's
one ``TrainConfig`` file (``gen-N/train.json``, written here once), with its rank in ``RANK``
and its own log. Every rank is forked by the agent's zygote (``agent.zygote``), a process that
imported torch and the engine once, in milliseconds. Warm (the default): the zygote imports
before the agent registers, so even the first start is a fork. Cold: nothing is imported ahead;
the zygote starts with the node's first assignment (one torch import per node, not per rank)
and every later restart of the node is a fork. A fresh ``python -m sailor_runtime.agent.zygote
--once`` per rank (importing torch itself) remains only as the fallback when the zygote is
gone. Either way a rank dies with its node (PR_SET_PDEATHSIG down the chain agent -> zygote ->
rank). Processes are spawned from one long-lived thread because Linux ties the death signal to
the spawning thread. (No ``preexec_fn``: Python code between fork and exec in a process with
gRPC threads can crash.)
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

from ..engine.config import RANK_ENV, TrainConfig, training_overrides
from ..errors import SailorRuntimeError
from ..topology import Topology
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
    metrics_path: Path | None
    """The step metrics file, on the metrics rank only (``Topology.metrics_rank``)."""
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
"""The step of a generation whose tensor memory every rank measures (engine.rank.memprobe): after
the first steps, so the optimizer states exist and allocations are steady."""


COLD_IMPORT_TIMEOUT_S = 20.0
"""How long a cold node's first start waits for its zygote's torch import (9 s wall on the
loaded 2-core dev VM) before starting that generation's ranks as fresh processes instead; below
the controller's 30 s Assign deadline, which the agent answers once its ranks started."""


def rank_environment(rank_env: dict[str, str], rank: int, device: int) -> dict[str, str]:
    """What a rank's environment sets over the agent's: its rank, the one GPU it sees
    (``cuda_visible``) and LOCAL_RANK 0, that GPU's index in what it sees. The agent's own
    LOCAL_RANK (a Kubeflow PyTorchJob pod, an agent started under torchrun) must not reach
    the rank: the engine takes LOCAL_RANK as its CUDA device, and LOCAL_RANK=3 with one
    visible GPU named cuda:3, which does not exist."""
    visible = cuda_visible(device, os.environ.get("CUDA_VISIBLE_DEVICES"))
    return {**rank_env, RANK_ENV: str(rank), "CUDA_VISIBLE_DEVICES": visible, "LOCAL_RANK": "0"}


@dataclass
class RankRunner:
    """The rank processes of this node, across generations."""

    workdir: Path
    threads_per_rank: int = 1
    rank_env: dict[str, str] = field(default_factory=dict)
    """Set in every rank (a CPU worker type's threads and cores, ``agent.cputypes``)."""
    warm: bool = False
    """Start the zygote now (before registering); else with the first assignment (cold)."""
    procs: list[RankProcess] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._metrics_lock = threading.Lock()
        """One reader of the metrics files at a time (heartbeats, and ``start`` dropping the
        stopped ranks), so no line is sent twice or skipped."""
        self._unsent: list[tuple[RankProcess, dict]] = []
        """Metrics of ranks dropped by ``start`` that no heartbeat has sent yet."""
        self._forker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rank-forker")
        self._zygote: Zygote | None = None
        self._closed = False
        self.rank_exited = threading.Event()
        """Set when a forked rank exits: the agent reports it without waiting a heartbeat."""
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
            self._zygote = Zygote(self._base_env(), on_exit=self.rank_exited.set)

    def wait_warm(self, timeout_s: float = 300.0) -> bool:
        """Block until the zygote has imported torch and the engine (or timeout)."""
        if not self.warm:
            return True
        self._forker.submit(lambda: None).result()  # the zygote has been started
        return self._zygote is not None and self._zygote.wait_ready(timeout_s)

    def _launch(
        self, argv: list[str], env: dict[str, str], log_path: Path, preload: tuple[str, ...] = ()
    ):
        """Fork the rank from the zygote; start it cold when there is none ready (or it
        died): never wait here for an import, the controller's Assign call is waiting."""
        if self._zygote is not None and self._zygote.ready.is_set():
            try:
                return self._zygote.fork(argv, env, str(log_path), preload=preload)
            except ZygoteError as exc:
                log.warning("%s; starting the rank cold and a new zygote", exc)
                self._forker.submit(self._ensure_zygote)  # runs after this spawn
        return start_cold(argv, env, str(log_path), self._base_env())

    # ---- commands ----------------------------------------------------------------------------
    def _spawn(self, a: ValidAssignment) -> list[RankProcess]:
        """Write the generation's one TrainConfig file, then start each rank on it."""
        gen_dir = self.workdir / f"gen-{a.generation}"
        gen_dir.mkdir(parents=True, exist_ok=True)
        cfg = train_config(a, gen_dir)
        path = cfg.write(gen_dir / "train.json")
        metrics_rank = Topology(a.plan).metrics_rank
        if not self.warm:  # cold: the first start imports torch once, in the zygote
            self._ensure_zygote()
            if self._zygote is not None and not self._zygote.wait_ready(COLD_IMPORT_TIMEOUT_S):
                log.warning(
                    "zygote not ready in %.0f s; this generation starts cold", COLD_IMPORT_TIMEOUT_S
                )
        started = []
        for rank, device in a.ranks:
            log_path = gen_dir / f"rank-{rank}.log"
            env = rank_environment(self.rank_env, rank, device)
            popen = self._launch([str(path)], env, log_path, cfg.preload_modules())
            metrics = Path(cfg.metrics_path) if rank == metrics_rank else None
            started.append(RankProcess(a.generation, rank, popen, log_path, metrics))
        return started

    def start(self, a: ValidAssignment) -> int:
        """Stop every older rank, then start the ranks of ``a``; returns how many started."""
        self.stop(generation=0, grace_s=1.0)
        started = self._forker.submit(self._spawn, a).result()
        with self._metrics_lock:
            with self._lock:
                gone = [p for p in self.procs if p.popen.poll() is not None]
                self.procs = [p for p in self.procs if p.popen.poll() is None] + started
            # the steps they trained since the last heartbeat stay in the run's metrics
            self._unsent += _read_new_metrics(gone)
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
        """Complete JSON lines appended to each rank's metrics file since the last call (and
        those of ranks dropped since)."""
        with self._lock:
            procs = list(self.procs)
        with self._metrics_lock:
            out, self._unsent = self._unsent, []
            return out + _read_new_metrics(procs)


def _read_new_metrics(procs: list[RankProcess]) -> list[tuple[RankProcess, dict]]:
    """The complete JSON lines appended to the metrics files of ``procs`` since last read."""
    out: list[tuple[RankProcess, dict]] = []
    for p in procs:
        if p.metrics_path is None:
            continue
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


def train_config(a: ValidAssignment, gen_dir: Path) -> TrainConfig:
    """The TrainConfig every rank of this node reads in generation ``a.generation``: the run's
    settings from its RunSpec (``TrainConfig.from_run``), the data from ``a.training``."""
    return TrainConfig.from_run(
        a.run,
        a.job,
        a.plan,
        checkpoint_dir=a.checkpoint_dir,
        metrics_path=str(gen_dir / f"rank-{Topology(a.plan).metrics_rank}.metrics.jsonl"),
        backend=a.backend,
        # tensor memory of each rank, measured once per generation (a step's worth of
        # profiler overhead) for the predicted-vs-measured report of `sailor run`
        memory_probe_step=MEMORY_PROBE_STEP,
        master_addr=a.master_addr,
        master_port=a.master_port,
        store_prefix=a.store_prefix,
        store_key=a.store_key,
        store_is_external=True,
        generation=a.generation,  # its saves are fenced to this generation
        on_save_error=a.on_save_error,
        **training_overrides(a.training),
    )


def _signal(popen: subprocess.Popen, sig: int) -> None:
    try:
        popen.send_signal(sig)
    except ProcessLookupError:
        pass


def cuda_visible(device: int, inherited: str | None) -> str:
    """The CUDA_VISIBLE_DEVICES of the rank on the node's ``device``-th GPU. The agent itself
    may see only some GPUs (Slurm's GRES, ``sailor run --local`` giving each worker its own, a
    container runtime): its device k is then the k-th entry of its own list, not GPU k."""
    if not inherited or not inherited.strip():
        return str(device)
    entries = [e.strip() for e in inherited.split(",") if e.strip()]
    if device >= len(entries):
        raise SailorRuntimeError(
            f"device {device} is not among this agent's CUDA_VISIBLE_DEVICES={inherited!r}; "
            "register with --gpus at most the number of visible GPUs",
            field="assignment.ranks",
        )
    return entries[device]
