"""Network profile of local processes over gloo (or NCCL with --device cuda): measured time per
message size, the alpha-beta fit and its error per point, and (gloo) the same ping-pong over a
plain TCP socket on loopback as the reference the measurement must respect.

Bars (exit 1 when one is missed, or when the profiler wrote no data for an op):
- fit: each op's relative RMS error of t(m) = latency + m / bandwidth over the measured sizes
  <= FIT_BAR. Source: the simulator prices every p2p and all-reduce of a local run with this
  fit, and a local run must be predicted within 25 % (PREDICTION_BAR, bench/reconfig_time.py);
  a link model already off by more than that on its own data would use that margin up.
- loopback (gloo only): at every size, gloo's one-way p2p time >= the socket's one-way time
  measured here on 127.0.0.1 at the same moment, within LOOPBACK_SLACK. gloo's CPU transport is
  TCP over the same loopback, so a faster figure means the profiler's clock did not wait for
  the transfer; the slack absorbs the noise of a shared machine.

    uv run python bench/profiler_network.py [--procs 2] [--max-bytes 64M] [--device cpu]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import polars as pl

from sailor_sim.simulate.network import Endpoint, load_network_file

FIT_BAR = 0.25
"""Relative RMS error of each op's alpha-beta fit (source: the 25 % local-run prediction bar)."""
LOOPBACK_SLACK = 0.25
"""gloo may look up to 25 % faster than the raw socket before the bench calls it wrong."""
LOOPBACK_REPS = 5


def _recv_exact(sock: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ConnectionError("loopback peer closed")
        got += n


def loopback_one_way(sizes: list[int]) -> dict[int, float]:
    """Median one-way time per size of a TCP ping-pong on 127.0.0.1 (send m, get m back, / 2:
    the profiler's own convention), with an echoing peer thread."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    biggest = max(sizes)

    def echo() -> None:
        conn, _ = server.accept()
        buf = memoryview(bytearray(biggest))
        with conn:
            for size in sizes:
                for _ in range(LOOPBACK_REPS):
                    _recv_exact(conn, buf[:size])
                    conn.sendall(buf[:size])

    peer = threading.Thread(target=echo, daemon=True)
    peer.start()
    out = {}
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        data = memoryview(bytearray(biggest))
        for size in sizes:
            times = []
            for _ in range(LOOPBACK_REPS):
                t0 = time.perf_counter()
                sock.sendall(data[:size])
                _recv_exact(sock, data[:size])
                times.append((time.perf_counter() - t0) / 2)
            out[size] = statistics.median(times)
    peer.join(10)
    server.close()
    return out


def profile(args: argparse.Namespace, tmp: str) -> tuple[dict, pl.DataFrame, object] | None:
    exe = Path(sys.executable).parent / "sailor-profiler"
    cmd = [str(exe), "network", "--procs", args.procs, "--max-bytes", args.max_bytes,
           "--device", args.device, "--out", tmp, "--json"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stderr, file=sys.stderr)
        return None
    fits = json.loads(proc.stdout)["fits"]
    frame = pl.read_parquet(Path(tmp) / "profiler" / "network.parquet")
    return fits, frame, load_network_file(Path(tmp) / "links.json")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", default="2")
    parser.add_argument("--max-bytes", default="64M")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        got = profile(args, tmp)
    if got is None:
        print("FAILED: the profiler did not finish; no data to check")
        return 1
    fits, frame, network = got
    gloo = args.device == "cpu"
    p2p_sizes = frame.filter(pl.col("op") == "p2p")["message_bytes"].to_list()
    reference = loopback_one_way(sorted(p2p_sizes)) if gloo and p2p_sizes else {}
    failures = [f"no {op} data" for op in ("p2p", "allreduce") if op not in fits]
    print(f"{'op':<10} {'bytes':>11} {'median us':>10} {'fit us':>9} {'err':>6} {'GB/s':>7}"
          f"{'socket us':>11} {'result':>7}")  # fmt: skip
    for row in frame.sort("op", "message_bytes").iter_rows(named=True):
        fit = fits[row["op"]]
        predicted = fit["latency_s"] + row["message_bytes"] / fit["bandwidth_Bps"]
        err = predicted / row["median_s"] - 1
        ref = reference.get(row["message_bytes"]) if row["op"] == "p2p" else None
        ok = ref is None or row["median_s"] >= ref * (1 - LOOPBACK_SLACK)
        if not ok:
            failures.append(
                f"p2p {row['message_bytes']} B: {row['median_s'] * 1e6:.1f} us is faster than "
                f"the plain socket's {ref * 1e6:.1f} us"
            )
        socket_us = "" if ref is None else f"{ref * 1e6:.1f}"
        print(f"{row['op']:<10} {row['message_bytes']:>11} {row['median_s'] * 1e6:>10.1f} "
              f"{predicted * 1e6:>9.1f} {err:>+6.0%} {row['bandwidth_Bps'] / 1e9:>7.2f}"
              f"{socket_us:>11} {'ok' if ok else 'FAST':>7}")  # fmt: skip
    for op, fit in fits.items():
        ok = fit["rel_rmse"] <= FIT_BAR
        if not ok:
            failures.append(f"fit {op}: relative RMS error {fit['rel_rmse']:.0%} > {FIT_BAR:.0%}")
        print(f"fit {op}: latency {fit['latency_s'] * 1e6:.1f} us, bandwidth "
              f"{fit['bandwidth_Bps'] / 1e9:.2f} GB/s, relative RMS error {fit['rel_rmse']:.0%} "
              f"(bar {FIT_BAR:.0%}): {'ok' if ok else 'MISSED'}")  # fmt: skip
    if gloo:
        link = network.link(Endpoint("local", "CPU", 1), Endpoint("local", "CPU", 1))
        print(f"simulator link local->local: {link.time(1e9):.3f} s per GB ({link.source})")
    if failures:
        print("\nMISSED: " + "; ".join(failures))
        return 1
    print("\nall bars met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
