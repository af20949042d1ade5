"""Network profiling: point-to-point and all-reduce time over message sizes between ranks.

Method (per message size m, powers of two from ``min_bytes`` to ``max_bytes``):

* p2p: ranks are paired (i, i + W/2), all pairs at once, as the original Sailor measured
  "concurrent sender/receiver pairs"; with ranks numbered node-major the pairs cross nodes.
  Each repetition is a ping-pong (send m, receive m back); one-way time = round trip / 2
  (the OSU latency benchmark's convention). Odd W leaves the last rank idle.
* all-reduce: every rank, a sum of m bytes of fp32. Besides the time, the NCCL-tests "bus
  bandwidth" 2 (W - 1) / W * m / t is reported, which is comparable across W.

Each repetition starts after a barrier; the clock runs on the host around the op plus a device
synchronize on CUDA (so NCCL's asynchronous kernels are included). With ``busy_s`` every rank
first computes that long (matrix products), as training computes between its collectives:
where ranks share cores (a local run emulating several GPUs on a few cores) the scheduler then
delays each ring step until the receiving rank gets a core back. Measured on a 2-core VM with
4 ranks: a 16-byte all-reduce takes 0.8 ms back to back and 4-7 ms after 2-40 ms of compute, a
1.4 MB one 5.7 ms and 8-11 ms; with a core per rank the difference disappears.

Per size, the median over repetitions (IQR as spread) on each rank, then the maximum over
ranks (the slowest rank paces a collective). ``fit`` turns each op's medians into
t(m) = latency + m / bandwidth.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..devices import DeviceSpec
from ..launch import RankContext
from ..timing import summarize

OPS = ("p2p", "allreduce")
KiB, MiB, GiB = 1024, 1024**2, 1024**3
DEFAULT_MIN_BYTES = 64 * KiB
DEFAULT_MAX_BYTES = 1 * GiB
MAX_MESSAGE_BYTES = 8 * GiB
"""Largest ``--max-bytes``: NCCL-tests' usual top size. Every rank holds a buffer of the largest
message (and the collective its own scratch beside it), and by a few hundred MiB the fit
t = latency + m / bandwidth is settled; a typo like ``--max-bytes 1000G`` asked each rank for
a terabyte and timed sizes doubling up to it."""


@dataclass(frozen=True)
class NetConfig:
    device: DeviceSpec
    min_bytes: int = DEFAULT_MIN_BYTES
    max_bytes: int = DEFAULT_MAX_BYTES
    warmup: int = 2
    reps: int = 10
    busy_s: float = 0.0
    """Compute this long on every rank before each repetition (see the module docstring)."""


@dataclass(frozen=True)
class NetPoint:
    op: str
    message_bytes: int
    median_s: float
    p25_s: float
    p75_s: float
    world_size: int


def message_sizes(min_bytes: int, max_bytes: int) -> list[int]:
    """Powers of two from min_bytes up to max_bytes (both rounded down to a power of two)."""
    low = 1 << max(2, int(min_bytes).bit_length() - 1)
    sizes = []
    size = low
    while size <= max_bytes:
        sizes.append(size)
        size *= 2
    return sizes


def _reps_for(size: int, reps: int) -> int:
    # Large messages are long and stable: fewer repetitions keep the sweep short.
    return reps if size <= 16 * MiB else max(3, reps // 3)


def network_worker(ctx: RankContext, cfg: NetConfig) -> list[NetPoint]:
    """Runs on every rank; every rank returns the same list (max over ranks)."""
    import torch
    import torch.distributed as dist

    device = "cpu" if cfg.device.kind == "cpu" else f"cuda:{cfg.device.index + ctx.local_rank}"
    if device.startswith("cuda"):
        torch.cuda.set_device(device)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    work = torch.ones(128, 128, device=device)

    def busy() -> None:
        end = time.perf_counter() + cfg.busy_s
        while time.perf_counter() < end:
            work @ work
        sync()

    half = ctx.world_size // 2
    peer = ctx.rank + half if ctx.rank < half else ctx.rank - half
    active = ctx.rank < 2 * half
    points = []
    sizes = message_sizes(cfg.min_bytes, cfg.max_bytes)
    for done, size in enumerate(sizes):
        if ctx.rank == 0:
            ctx.progress((size, done, len(sizes)))
        buf = torch.ones(size // 4, dtype=torch.float32, device=device)
        reps = _reps_for(size, cfg.reps)

        def p2p(buf=buf) -> float:
            busy()
            dist.barrier()
            t0 = time.perf_counter()
            if active and ctx.rank < half:
                dist.send(buf, peer)
                dist.recv(buf, peer)
            elif active:
                dist.recv(buf, peer)
                dist.send(buf, peer)
            sync()
            return (time.perf_counter() - t0) / 2

        def allreduce(buf=buf) -> float:
            busy()
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(buf)
            sync()
            return time.perf_counter() - t0

        for op, fn in (("p2p", p2p), ("allreduce", allreduce)):
            for _ in range(cfg.warmup):
                fn()
            stat = summarize([fn() for _ in range(reps)])
            worst = torch.tensor(
                [stat.median, stat.p25, stat.p75], dtype=torch.float64, device=device
            )
            dist.all_reduce(worst, op=dist.ReduceOp.MAX)
            med, p25, p75 = worst.tolist()
            points.append(NetPoint(op, size, med, p25, p75, ctx.world_size))
        del buf
    return points


def bus_bandwidth(point: NetPoint) -> float:
    """Bytes/s; for all-reduce the NCCL-tests bus bandwidth, for p2p plain m / t."""
    algo = point.message_bytes / point.median_s
    if point.op == "allreduce" and point.world_size > 1:
        return algo * 2 * (point.world_size - 1) / point.world_size
    return algo
