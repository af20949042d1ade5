"""Run every rank of a plan as local processes (tests, benchmarks and ``sailor run --local``).

``launch_local`` hosts the rendezvous TCPStore in the calling process (bound to port 0; the
port it got is read back and handed to the ranks, so no port race) and starts ``python -m
sailor_runtime.engine.worker`` once per rank with ``--store-is-external``. ``launch_many`` runs
several (job, plan) runs one after the other in the same processes (``multirun``), which saves
the interpreter and torch start-up per run on small machines; each run gets its own store
prefix.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch.distributed as dist

from sailor_sim.job import Job
from sailor_sim.plan import Plan

from .options import ExecutionOptions
from .topology import Topology


def host_store() -> dist.TCPStore:
    """A TCPStore on 127.0.0.1 with an ephemeral port (read ``.port``)."""
    return dist.TCPStore(
        "127.0.0.1",
        0,
        world_size=None,
        is_master=True,
        timeout=timedelta(seconds=300),
        wait_for_workers=False,
    )


def _env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(threads))
    return env


@dataclass
class LocalRun:
    """Processes of one local launch; ``wait`` returns their exit codes."""

    procs: list[subprocess.Popen]
    store: dist.TCPStore
    workdir: Path

    def wait(self, timeout_s: float = 600.0) -> list[int]:
        deadline = time.monotonic() + timeout_s
        codes: list[int | None] = [None] * len(self.procs)
        while any(c is None for c in codes):
            for i, p in enumerate(self.procs):
                if codes[i] is None:
                    codes[i] = p.poll()
            if any(c not in (None, 0) for c in codes) or time.monotonic() > deadline:
                self.kill()  # one rank failed (or time is up): the others would hang
                return [p.wait() for p in self.procs]
            time.sleep(0.05)
        return [int(c) for c in codes]

    def kill(self, sig: int = 9) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(sig)


def start_local(
    job: Job,
    plan: Plan,
    *,
    steps: int,
    checkpoint_dir: str | Path,
    checkpoint_every: int = 0,
    metrics_path: str | Path | None = None,
    seed: int = 0,
    lr: float = 1e-3,
    schedule: str = "1f1b",
    dtype: str | None = None,
    options: ExecutionOptions | None = None,
    store_prefix: str = "sailor",
    env: dict[str, str] | None = None,
    log_dir: str | Path | None = None,
) -> LocalRun:
    """Start all ranks (non-blocking); this process hosts their TCPStore."""
    world = Topology(plan.check(job)).world_size
    workdir = Path(tempfile.mkdtemp(prefix="sailor-launch-"))
    (workdir / "job.json").write_text(json.dumps(job.to_dict()))
    (workdir / "plan.json").write_text(plan.to_json())
    (workdir / "options.json").write_text(json.dumps((options or ExecutionOptions()).to_dict()))
    store = host_store()
    procs = []
    for rank in range(world):
        cmd = [
            sys.executable,
            "-m",
            "sailor_runtime.engine.worker",
            "--job",
            str(workdir / "job.json"),
            "--plan",
            str(workdir / "plan.json"),
            "--rank",
            str(rank),
            "--world-size",
            str(world),
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            str(store.port),
            "--store-prefix",
            store_prefix,
            "--checkpoint-dir",
            str(checkpoint_dir),
            "--steps",
            str(steps),
            "--checkpoint-every",
            str(checkpoint_every),
            "--seed",
            str(seed),
            "--lr",
            str(lr),
            "--schedule",
            schedule,
            "--options",
            str(workdir / "options.json"),
            "--store-is-external",
        ]
        if metrics_path:
            cmd += ["--metrics", str(metrics_path)]
        if dtype:
            cmd += ["--dtype", dtype]
        out = open(Path(log_dir or workdir) / f"rank{rank}.log", "w")
        procs.append(
            subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, env={**_env(1), **(env or {})}
            )
        )
    return LocalRun(procs, store, workdir)


def launch_local(job: Job, plan: Plan, *, timeout_s: float = 600.0, **kwargs) -> list[int]:
    """Run all ranks to completion; returns their exit codes (all 0 on success). Keyword
    arguments as ``start_local``; rank logs go to ``log_dir`` (default: a temp dir)."""
    return start_local(job, plan, **kwargs).wait(timeout_s)


def launch_many(runs: list[dict], *, log_dir: str | Path, timeout_s: float = 900.0) -> int:
    """Run several runs in one set of forked rank processes (see ``multirun`` for the run
    fields); returns the exit status (0 when every rank finished every run)."""
    world = max(Topology(Plan.from_dict(r["plan"])).world_size for r in runs)
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    spec = log_dir / "runs.json"
    spec.write_text(json.dumps(runs))
    store = host_store()
    cmd = [
        sys.executable,
        "-m",
        "sailor_runtime.engine.multirun",
        "--runs",
        str(spec),
        "--world",
        str(world),
        "--master-port",
        str(store.port),
    ]
    with open(log_dir / "ranks.log", "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=_env(1))
        return LocalRun([proc], store, log_dir).wait(timeout_s)[0]
