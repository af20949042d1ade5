"""Run every rank of a plan as local processes (tests, benchmarks and ``sailor run --local``).

``launch_local`` hosts the rendezvous store (``storeserver``, under a fresh secret) in the
calling process (bound to port 0; the port it got and the run's namespace key are written into
the ranks' ``TrainConfig``, so no port race and no other run's rank gets in), writes
that one config file and starts ``RANK=r python -m sailor_runtime.engine.worker CONFIG.json``
once per rank. ``launch_many`` runs several (job, plan) runs one after the other in the same
processes (``multirun``), which saves the interpreter and torch start-up per run on small
machines; each run gets its own store prefix.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sailor_sim import Job, Plan

from .config import RANK_ENV, EngineError, LRSchedule, TrainConfig, training_overrides
from .storeserver import StoreServer, namespace_key, secret_keys


class HostedStore:
    """The launcher's rendezvous store on 127.0.0.1 (an ephemeral port, read ``.port``) under
    a fresh secret; ``key(prefix)`` is the hex key ranks of that namespace present."""

    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret or secrets.token_bytes(32)
        self.server = StoreServer.listen("127.0.0.1", 0, secret_keys(self._secret))
        self.port = self.server.port

    def key(self, prefix: str) -> str:
        return namespace_key(self._secret, prefix).hex()

    def close(self) -> None:
        self.server.close()


def host_store(secret: bytes | None = None) -> HostedStore:
    """The launcher's rendezvous store (``HostedStore``; ``secret``: a fresh one)."""
    return HostedStore(secret)


def _env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(threads))
    return env


@dataclass
class LocalRun:
    """Processes of one local launch; ``wait`` returns their exit codes."""

    procs: list[subprocess.Popen]
    store: HostedStore
    workdir: Path

    def wait(self, timeout_s: float = 600.0) -> list[int]:
        """Exit codes of every rank; the store closes once they have all exited."""
        try:
            return self._wait(timeout_s)
        finally:
            self.store.close()

    def _wait(self, timeout_s: float) -> list[int]:
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
    env: dict[str, str] | None = None,
    log_dir: str | Path | None = None,
    training: dict | None = None,
    **settings: Any,
) -> LocalRun:
    """Start all ranks (non-blocking); this process hosts their rendezvous store. ``settings``
    are ``TrainConfig.for_job``'s: a ``run`` (``RunSpec``) and any of its fields to replace
    (``steps``, ``checkpoint_every``, ``seed``, ``precision``, ``options``), ``lr`` (an
    ``LRSchedule``, or a float: its peak, decaying to a tenth) and the config's own fields
    (``checkpoint_dir``, ``metrics_path``, ``backend``, ``schedule``, ``dtype``,
    ``memory_probe_step``, ``store_prefix``, ``generation``, ``on_save_error``: ``nccl`` puts
    rank r on CUDA device r of this machine, ``generation`` is the run fence their saves must
    match). ``training``: more TrainConfig keys (``config.TRAINING_KEYS``: data, recipe),
    replacing the ones above."""
    store = host_store()
    settings = _local_settings(settings)
    settings.update(training_overrides(training or {}))
    prefix = settings.pop("store_prefix", TrainConfig.__dataclass_fields__["store_prefix"].default)
    cfg = TrainConfig.for_job(
        job,
        plan.check(job),
        master_port=store.port,
        store_prefix=prefix,
        store_key=store.key(prefix),
        store_is_external=True,
        **settings,
    )
    workdir = Path(tempfile.mkdtemp(prefix="sailor-launch-"))
    path = cfg.write(workdir / "train.json")
    procs = []
    for rank in range(cfg.world_size):
        out = open(Path(log_dir or workdir) / f"rank{rank}.log", "w")
        rank_env = {**_env(1), **(env or {}), RANK_ENV: str(rank), "LOCAL_RANK": str(rank)}
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "sailor_runtime.engine.worker", str(path)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=rank_env,
            )
        )
    return LocalRun(procs, store, workdir)


def _local_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """``start_local``'s settings in ``TrainConfig.for_job``'s shape: paths as strings, a
    float ``lr`` as its ``LRSchedule``."""
    out = dict(settings)
    for name in ("checkpoint_dir", "metrics_path"):
        if out.get(name) is not None:
            out[name] = str(out[name])
    lr = out.get("lr")
    if isinstance(lr, (int, float)) and not isinstance(lr, bool):
        out["lr"] = LRSchedule(max_lr=lr, min_lr=lr / 10)
    return out


def launch_local(job: Job, plan: Plan, *, timeout_s: float = 600.0, **kwargs) -> list[int]:
    """Run all ranks to completion; returns their exit codes (all 0 on success). Keyword
    arguments as ``start_local``; rank logs go to ``log_dir`` (default: a temp dir)."""
    return start_local(job, plan, **kwargs).wait(timeout_s)


STORE_FIELDS = ("master_addr", "master_port", "store_prefix", "store_key", "store_is_external")
"""The rendezvous of every ``launch_many`` run: the launcher's store, prefix ``run{i}``."""


def run_config(run: dict, port: int, prefix: str, key: str) -> TrainConfig:
    """The TrainConfig of one ``launch_many`` run: its keys are TrainConfig's (``metrics`` is
    accepted for ``metrics_path``) except the store's, which are filled in here."""
    taken = sorted(set(run) & set(STORE_FIELDS))
    if taken:
        raise EngineError(f"{taken} are set by launch_many; leave them out", field="run")
    data = {("metrics_path" if k == "metrics" else k): v for k, v in run.items()}
    data.update(master_port=port, store_prefix=prefix, store_key=key, store_is_external=True)
    return TrainConfig.from_dict(data)


def launch_many(runs: list[dict], *, log_dir: str | Path, timeout_s: float = 900.0) -> int:
    """Run several runs in one set of forked rank processes (``multirun``); returns the exit
    status (0 when every rank finished every run). A run is a dict with the keys of
    ``TrainConfig`` (``metrics`` for ``metrics_path``; job and plan as dicts); the store and
    its prefix (``run{i}``) are filled in here. Bad runs raise ``EngineError`` before any
    process starts."""
    store = host_store()
    configs = [
        run_config(r, store.port, f"run{i}", store.key(f"run{i}")) for i, r in enumerate(runs)
    ]
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    spec = log_dir / "runs.json"
    fd = os.open(spec, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds the store keys
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps([c.to_dict() for c in configs]))
    cmd = [sys.executable, "-m", "sailor_runtime.engine.multirun", str(spec)]
    with open(log_dir / "ranks.log", "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=_env(1))
        return LocalRun([proc], store, log_dir).wait(timeout_s)[0]
