"""Network profile of local processes over gloo (or NCCL with --device cuda): measured time per
message size, the alpha-beta fit and its error per point.

    uv run python bench/profiler_network.py [--procs 2] [--max-bytes 64M] [--device cpu]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import polars as pl

from sailor_sim.network import Endpoint, load_network_file


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", default="2")
    parser.add_argument("--max-bytes", default="64M")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    exe = Path(sys.executable).parent / "sailor-profiler"
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [str(exe), "network", "--procs", args.procs, "--max-bytes", args.max_bytes,
               "--device", args.device, "--out", tmp, "--json"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            print(proc.stderr, file=sys.stderr)
            return 1
        fits = json.loads(proc.stdout)["fits"]
        frame = pl.read_parquet(Path(tmp) / "profiler" / "network.parquet")
        network = load_network_file(Path(tmp) / "links.json")
    print(f"{'op':<10} {'bytes':>11} {'median us':>10} {'fit us':>9} {'err':>6} {'GB/s':>7}")
    for row in frame.sort("op", "message_bytes").iter_rows(named=True):
        fit = fits[row["op"]]
        predicted = fit["latency_s"] + row["message_bytes"] / fit["bandwidth_Bps"]
        err = predicted / row["median_s"] - 1
        print(f"{row['op']:<10} {row['message_bytes']:>11} {row['median_s'] * 1e6:>10.1f} "
              f"{predicted * 1e6:>9.1f} {err:>+6.0%} {row['bandwidth_Bps'] / 1e9:>7.2f}")
    for op, fit in fits.items():
        print(f"fit {op}: latency {fit['latency_s'] * 1e6:.1f} us, bandwidth "
              f"{fit['bandwidth_Bps'] / 1e9:.2f} GB/s, relative RMS error {fit['rel_rmse']:.0%}")
    gpu = "CPU" if args.device == "cpu" else None
    if gpu:
        link = network.link(Endpoint("local", gpu, 1), Endpoint("local", gpu, 1))
        print(f"simulator link local->local: {link.time(1e9):.3f} s per GB ({link.source})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
