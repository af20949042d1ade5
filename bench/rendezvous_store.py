"""Rendezvous time of N gloo ranks: torch's TCPStore vs Sailor's authenticated store.

Each rank times its store's connection, init_process_group, 10 all-reduces, a two-rank
subgroup and a barrier (imports and the process start are not counted); a trial's time is its
slowest rank's. Trials alternate the two stores; the medians are printed. Fails when the
authenticated store is more than ``--bar`` seconds slower (issue 24: rendezvous must not get
slower by more than ~1 s).

    uv run python bench/rendezvous_store.py --ranks 8 --trials 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from datetime import timedelta


def _rank(kind: str, port: int, rank: int, world: int, key: str) -> None:
    import torch
    import torch.distributed as dist

    from sailor_runtime.engine.rendezvous import RendezvousStore  # imported by every rank anyway

    t0 = time.perf_counter()
    timeout = timedelta(seconds=120)
    if kind == "tcpstore":
        tcp = dist.TCPStore("127.0.0.1", port, None, False, timeout, wait_for_workers=False)
        store = dist.PrefixStore("gen-1", tcp)
    else:
        store = RendezvousStore("127.0.0.1", port, "gen-1", bytes.fromhex(key), timeout)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timeout)
    x = torch.ones(4)
    for _ in range(10):
        dist.all_reduce(x)
    dist.new_group([0, 1])
    dist.barrier()
    assert x[0].item() == world**10
    print(f"{time.perf_counter() - t0:.4f}", flush=True)
    dist.destroy_process_group()


def _trial(kind: str, world: int) -> float:
    import torch.distributed as dist

    from sailor_runtime.engine import storeserver

    key = "00"
    if kind == "tcpstore":
        server = dist.TCPStore("127.0.0.1", 0, None, True, wait_for_workers=False)
    else:
        secret = os.urandom(32)
        server = storeserver.StoreServer.listen("127.0.0.1", 0, storeserver.secret_keys(secret))
        key = storeserver.namespace_key(secret, "gen-1").hex()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, __file__, "--rank-of", kind, str(server.port), str(world), key]
    procs = [
        subprocess.Popen([*cmd, str(r)], stdout=subprocess.PIPE, text=True, env=env)
        for r in range(world)
    ]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"error: {kind} ranks failed: {[p.returncode for p in procs]}")
    if kind != "tcpstore":
        server.close()
    return max(float(o.split()[-1]) for o in outs)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--rank-of":
        kind, port, world, key, rank = sys.argv[2:7]
        _rank(kind, int(port), int(rank), int(world), key)
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--bar", type=float, default=1.0, help="seconds the new store may add")
    args = p.parse_args()
    times: dict[str, list[float]] = {"tcpstore": [], "sailor": []}
    for _ in range(args.trials):
        for kind in times:
            times[kind].append(_trial(kind, args.ranks))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{'store':10} {'median s':>9}  trials (slowest rank, {args.ranks} gloo ranks)")
    for kind, values in times.items():
        print(f"{kind:10} {med[kind]:9.3f}  {' '.join(f'{v:.3f}' for v in values)}")
    extra = med["sailor"] - med["tcpstore"]
    print(f"sailor - tcpstore: {extra:+.3f} s (bar {args.bar:+.1f} s)")
    return 0 if extra <= args.bar else 1


if __name__ == "__main__":
    sys.exit(main())
