"""Run a function on every rank of a torch.distributed group.

Two ways, one code path for the measured function ``fn(ctx, *args)``:

* ``run_local``: this machine, ``world_size`` fresh processes (forkserver), rendezvous through a
  TCPStore the parent binds on port 0 (no fixed or guessed ports). Results come back to the
  parent through a queue; a failing rank's last error line is raised as ``WorkerError``.
* ``run_from_env``: several machines, launched by torchrun or by hand with the usual
  ``MASTER_ADDR`` / ``MASTER_PORT`` / ``RANK`` / ``WORLD_SIZE`` (and ``LOCAL_RANK``) variables;
  ``fn`` runs in this process and its result is returned on every rank.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from .errors import WorkerError

_STORE_HOST = "127.0.0.1"
_PRELOAD = ["torch", "torch.distributed", "sailor_profiler.compute", "sailor_profiler.network"]


@dataclass(frozen=True)
class RankContext:
    """What a rank knows about itself."""

    rank: int
    world_size: int
    local_rank: int
    backend: str
    progress: Callable[[Any], None] = lambda _payload: None
    """Report progress (rank 0 only is enough): to the parent under ``run_local``, to
    ``run_from_env``'s ``on_progress`` under an external launcher; else a no-op."""


def env_launched() -> bool:
    """True when torch.distributed environment variables describe a multi-process launch."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def threads_per_rank(world_size: int) -> int:
    """CPU threads of one rank: OMP_NUM_THREADS when set, else 1.

    One thread per rank is the emulated CPU device (the runtime's agents run local ranks with
    OMP_NUM_THREADS=1), and it keeps timings sane on a shared machine: OpenMP threads that wait
    at a barrier for a descheduled sibling made times 10-100x worse under load here."""
    raw = os.environ.get("OMP_NUM_THREADS", "")
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    return 1


def usable_cores() -> int:
    """Cores this process may run on: its CPU affinity (a container's or taskset's share),
    else the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no sched_getaffinity (macOS)
        return os.cpu_count() or 1


def _rank_main(
    fn, rank, world_size, port, prefix, backend, timeout_s, args, results, cuda_base
) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(threads_per_rank(world_size))
    if cuda_base is not None:  # bind this rank's GPU before NCCL's first collective
        torch.cuda.set_device(cuda_base + rank)
    try:
        store = dist.TCPStore(
            _STORE_HOST, port, world_size, is_master=False, timeout=timedelta(seconds=timeout_s)
        )
        dist.init_process_group(
            backend,
            store=dist.PrefixStore(prefix, store),
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=timeout_s),
        )
        try:

            def progress(payload: Any) -> None:
                results.put((rank, "progress", payload))

            result = fn(RankContext(rank, world_size, rank, backend, progress), *args)
        finally:
            dist.destroy_process_group()
        results.put((rank, "ok", result))
    except BaseException as exc:  # report every failure to the parent, then exit
        last = traceback.format_exception_only(type(exc), exc)[-1].strip()
        results.put((rank, "error", last))


def run_local(
    fn: Callable[..., Any],
    world_size: int,
    args: tuple = (),
    backend: str = "gloo",
    timeout_s: float = 300.0,
    on_progress: Callable[[Any], None] | None = None,
    cuda_base: int | None = None,
) -> list[Any]:
    """Run ``fn(ctx, *args)`` on ``world_size`` local processes; return results by rank.

    ``timeout_s`` bounds the wait for each message from a rank (a hung rank cannot hang us).
    ``cuda_base``: rank r uses GPU ``cuda_base + r`` (None on CPU)."""
    import torch.distributed as dist

    store = dist.TCPStore(
        _STORE_HOST,
        0,
        world_size + 1,
        is_master=True,
        wait_for_workers=False,
        timeout=timedelta(seconds=timeout_s),
    )
    prefix = f"sailor-profiler/{uuid.uuid4().hex}"
    ctx = _context()
    results = ctx.Queue()
    procs = [
        ctx.Process(
            target=_rank_main,
            daemon=True,
            args=(
                fn,
                r,
                world_size,
                store.port,
                prefix,
                backend,
                timeout_s,
                args,
                results,
                cuda_base,
            ),
        )
        for r in range(world_size)
    ]
    for p in procs:
        p.start()
    try:
        return _collect(procs, results, world_size, timeout_s, on_progress)
    except BaseException:  # interrupted (Ctrl-C; SIGTERM: ``inputs.Terminated``) or failed
        for p in procs:  # a rank mid-collective never returns by itself: stop them now
            if p.is_alive():
                p.terminate()
        raise
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
        del store


def _context():
    """A forkserver that has imported torch and the profiler once: every rank forks from it,
    so ranks start in well under a second instead of each importing torch (seconds). The
    server never runs an op or touches CUDA, so its children are as clean as spawned ones
    (a plain fork of this process would inherit OpenMP and CUDA state, which is unsafe)."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    return ctx


def _collect(procs, results, world_size: int, timeout_s: float, on_progress) -> list[Any]:
    out: dict[int, Any] = {}
    while len(out) < world_size:
        try:
            rank, status, payload = results.get(timeout=timeout_s)
        except queue.Empty:
            dead = [i for i, p in enumerate(procs) if not p.is_alive() and i not in out]
            raise WorkerError(
                f"no result within {timeout_s:.0f} s (ranks exited early: {dead})", field="workers"
            ) from None
        if status == "progress":
            if on_progress is not None:
                on_progress(payload)
            continue
        if status != "ok":
            raise WorkerError(_failures(results, {rank: payload}), field="workers")
        out[rank] = payload
    return [out[r] for r in range(world_size)]


def _failures(results, errors: dict[int, str], grace_s: float = 3.0) -> str:
    """All ranks' errors that arrive within a short grace period: the first one to arrive is
    often a peer's 'connection closed', the cause is in another rank's message."""
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            rank, status, payload = results.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        if status == "error":
            errors[rank] = payload
    return "; ".join(f"rank {r} failed: {msg}" for r, msg in sorted(errors.items()))


def run_from_env(
    fn: Callable[..., Any],
    args: tuple = (),
    backend: str = "gloo",
    timeout_s: float = 600.0,
    on_progress: Callable[[Any], None] | None = None,
) -> Any:
    """Join the group described by the environment and run ``fn`` in this process;
    ``on_progress`` gets what ``fn`` reports (``RankContext.progress``), in this process."""
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    dist.init_process_group(
        backend,
        init_method="env://",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=timeout_s),
    )
    try:
        ctx = RankContext(rank, world, local_rank, backend, on_progress or (lambda _p: None))
        return fn(ctx, *args)
    except RuntimeError as exc:
        if not _lost_peer(exc):
            raise
        raise WorkerError(
            f"rank {rank} of {world} lost its peers mid-measurement "
            f"({' '.join(str(exc).split())[:300]}); another rank exited, was killed or lost its "
            "network: see that rank's log, then start all ranks again",
            field="workers",
        ) from None
    finally:
        dist.destroy_process_group()


PEER_LOSS_MARKS = (
    "Connection reset by peer",
    "Connection closed by peer",
    "Broken pipe",
    "remote process exited",
    "Socket Timeout",
)
"""What gloo's and NCCL's errors say when a peer rank is gone (gloo raises a plain
RuntimeError: 'Read error ...: Connection reset by peer'); such an error is the peer's story,
not a defect of this rank."""


def _lost_peer(exc: RuntimeError) -> bool:
    import torch.distributed as dist

    text = str(exc)
    return isinstance(exc, dist.DistError) or any(mark in text for mark in PEER_LOSS_MARKS)
