"""The ``network`` command: local processes (default) or a torch.distributed launch."""

from __future__ import annotations

from pathlib import Path

from sailor_sim import get_zone

from ..compute.command import check_out_dir
from ..devices import check_tp_fits, parse_device
from ..errors import SweepError
from ..launch import env_launched, run_from_env, run_local
from ..profiles.provenance import gpu_type_for, provenance
from .measure import NetConfig, message_sizes, network_worker
from .profile import fit_ops, write_network_profile


def run_network(
    out,
    device,
    procs,
    min_bytes,
    max_bytes,
    warmup,
    reps,
    zone,
    peer_zone,
    gpu_type,
    busy_ms: float = 0.0,
) -> dict | None:
    """Measure, fit, write; returns a summary on the writing rank, None on the others."""
    check_out_dir(out)
    dev = parse_device(device)
    get_zone(zone)
    peer_zone = peer_zone or zone
    get_zone(peer_zone)
    if min_bytes > max_bytes or not message_sizes(min_bytes, max_bytes):
        raise SweepError(
            f"min_bytes {min_bytes} must be <= max_bytes {max_bytes}", field="max_bytes"
        )
    if reps < 1 or warmup < 0:
        raise SweepError("need reps >= 1 and warmup >= 0", field="reps")
    if not 0 <= busy_ms <= 60_000:
        raise SweepError(f"busy_ms {busy_ms} must be between 0 and 60000", field="busy_ms")
    gpu = gpu_type_for(dev, gpu_type)
    cfg = NetConfig(dev, min_bytes, max_bytes, warmup, reps, busy_s=busy_ms / 1e3)
    if env_launched():
        import os

        points = run_from_env(network_worker, (cfg,), backend=dev.backend)
        if int(os.environ["RANK"]) != 0:
            return None
        intra = os.environ.get("LOCAL_WORLD_SIZE") == os.environ["WORLD_SIZE"]
    else:
        if procs < 2:
            raise SweepError(f"need at least 2 processes, got {procs}", field="procs")
        check_tp_fits(dev, procs)
        points = run_local(
            network_worker,
            procs,
            (cfg,),
            backend=dev.backend,
            timeout_s=600,
            cuda_base=dev.cuda_base,
        )[0]
        intra = True
    prov = provenance(
        dev, gpu, world_size=points[0].world_size, warmup=warmup, reps=reps, busy_ms=busy_ms
    )
    files = write_network_profile(points, out, gpu, zone, peer_zone, intra, prov)
    fits = fit_ops(points)
    return {
        "fits": {op: vars(f) for op, f in fits.items()},
        "links": str(Path(out) / "links.json"),
        "files": [str(f) for f in files],
    }
