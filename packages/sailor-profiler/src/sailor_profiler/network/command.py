"""The ``network`` command: local processes (default) or a torch.distributed launch."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from sailor_sim import get_zone

from ..compute.command import check_out_dir
from ..devices import check_tp_fits, parse_device
from ..errors import SweepError
from ..launch import env_launched, run_from_env, run_local
from ..profiles.provenance import gpu_type_for, provenance
from ..profiles.store import NETWORK_FILE, read_network
from ..timing import check_repetitions
from .measure import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MIN_BYTES,
    MAX_MESSAGE_BYTES,
    GiB,
    NetConfig,
    message_sizes,
    network_worker,
)
from .profile import LinkPlace, fit_ops, write_network_profile


@dataclass(frozen=True)
class NetworkRequest:
    """What ``sailor-profiler network`` is asked, as one value (the CLI's flags; ``run_network``
    takes it whole). ``config`` checks it and gives the measurement's ``NetConfig``."""

    out: Path
    """Folder for links.json and tables."""
    device: str = "cpu"
    procs: int = 2
    """Local processes (unless RANK etc. are set)."""
    min_bytes: int = DEFAULT_MIN_BYTES
    max_bytes: int = DEFAULT_MAX_BYTES
    warmup: int = 2
    reps: int = 10
    zone: str = "local"
    peer_zone: str | None = None
    """Zone of the peers; None: ``zone``."""
    gpu_type: str | None = None
    busy_ms: float = 0.0

    def config(self) -> NetConfig:
        """The measurement's settings; bad values raise ``SweepError`` naming the field."""
        dev = parse_device(self.device)
        get_zone(self.zone)
        if self.peer_zone is not None and not self.peer_zone.strip():
            raise SweepError(
                "is empty; name the peers' zone, or leave --peer-zone out for --zone's",
                field="peer_zone",
            )
        get_zone(self.peer)
        min_bytes, max_bytes = self.min_bytes, self.max_bytes
        if max_bytes > MAX_MESSAGE_BYTES:
            raise SweepError(
                f"must be at most {MAX_MESSAGE_BYTES // GiB}G, got {max_bytes} bytes",
                field="max_bytes",
            )
        if min_bytes > max_bytes or not message_sizes(min_bytes, max_bytes):
            raise SweepError(
                f"min_bytes {min_bytes} must be <= max_bytes {max_bytes}", field="max_bytes"
            )
        check_repetitions(self.warmup, self.reps)
        if not 0 <= self.busy_ms <= 60_000:
            raise SweepError(f"busy_ms {self.busy_ms} must be between 0 and 60000", field="busy_ms")
        return NetConfig(
            dev, min_bytes, max_bytes, self.warmup, self.reps, busy_s=self.busy_ms / 1e3
        )

    @property
    def peer(self) -> str:
        return self.zone if self.peer_zone is None else self.peer_zone


def say_progress(payload: tuple[int, int, int]) -> None:
    """One line on stderr as each message size starts (rank 0's): a sweep up to 1G runs for
    minutes, and under an external launcher nothing else shows that the ranks got past their
    rendezvous."""
    size, done, total = payload
    print(f"network: measuring {_size_name(size)} messages ({done + 1}/{total})",
          file=sys.stderr, flush=True)  # fmt: skip


def _size_name(size: int) -> str:
    """A power-of-two size as ``--max-bytes`` takes it: 64K, 16M, 1G (bytes below 1K)."""
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if size >= 1 << shift:
            return f"{size >> shift}{unit}"
    return f"{size}B"


def run_network(request: NetworkRequest) -> dict | None:
    """Measure, fit, write; returns a summary on the writing rank, None on the others."""
    check_out_dir(request.out)
    read_network(Path(request.out) / NETWORK_FILE)  # a corrupt one stops us before measuring
    cfg = request.config()
    dev = cfg.device
    gpu = gpu_type_for(dev, request.gpu_type)
    if env_launched():
        import os

        points = run_from_env(network_worker, (cfg,), backend=dev.backend, on_progress=say_progress)
        if int(os.environ["RANK"]) != 0:
            return None
        intra = os.environ.get("LOCAL_WORLD_SIZE") == os.environ["WORLD_SIZE"]
    else:
        procs = request.procs
        if procs < 2:
            raise SweepError(f"need at least 2 processes, got {procs}", field="procs")
        check_tp_fits(dev, procs, field="procs", knob="--procs")
        points = run_local(
            network_worker,
            procs,
            (cfg,),
            backend=dev.backend,
            timeout_s=600,
            cuda_base=dev.cuda_base,
            on_progress=say_progress,
        )[0]
        intra = True
    prov = provenance(
        dev,
        gpu,
        world_size=points[0].world_size,
        warmup=request.warmup,
        reps=request.reps,
        busy_ms=request.busy_ms,
    )
    place = LinkPlace(gpu, request.zone, request.peer, intra)
    files = write_network_profile(points, request.out, place, prov)
    fits = fit_ops(points)
    return {
        "fits": {op: vars(f) for op, f in fits.items()},
        "links": str(Path(request.out) / "links.json"),
        "files": [str(f) for f in files],
    }
