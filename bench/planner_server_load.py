"""The planner server under 32 clients that each cancel their Plan after 1 s (issue 13).

Starts a real ``sailor-planner serve`` process on 127.0.0.1, then for ``ROUNDS`` rounds sends 32
concurrent Plan requests on a 40-zone x 4-type inventory (no deadline: the search alone would
run for minutes) and cancels each after 1 s. Meanwhile it asks Health every 0.2 s and reads the
server's resident memory (VmRSS) every 0.2 s.

Bars: RSS stays below 1 GB, every Health answer comes back within 1 s, and after the last
cancel the server is idle again (a small Plan answered). Prints a table; exits 1 when a bar is
missed or a measurement is missing.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from sailor_planner.client import PlannerClient
from sailor_planner.proto import planner_pb2_grpc
from sailor_sim import Inventory, Job
from sailor_sim.prices import zones_offering

CLIENTS = 32
CANCEL_AFTER_S = 1.0
ROUNDS = 4
RSS_BAR_MB = 1024.0
HEALTH_BAR_S = 1.0
SAMPLE_S = 0.2

JOB = Job.create("OPT-350M", 1024, 2048)
TYPES = ("A100-40", "V100-16", "H100-80", "T4")


def wide_inventory(per_pool: int = 250) -> Inventory:
    zones = zones_offering(TYPES)[:40]
    return Inventory.of({(g, z): per_pool for g in TYPES for z in zones})


def start_server() -> tuple[subprocess.Popen, str]:
    code = "from sailor_planner.cli import main; main()"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "serve", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    line = proc.stdout.readline() if proc.stdout else ""
    if " on " not in line:
        proc.kill()
        raise SystemExit(f"planner server did not start: {line!r}")
    address = line.split(" on ", 1)[1].split()[0]
    return proc, address


def rss_mb(pid: int) -> float | None:
    try:
        for row in Path(f"/proc/{pid}/status").read_text().splitlines():
            if row.startswith("VmRSS:"):
                return int(row.split()[1]) / 1024
    except OSError:
        return None
    return None


class Monitor(threading.Thread):
    """Samples RSS and Health latency until stopped."""

    def __init__(self, pid: int, address: str) -> None:
        super().__init__(daemon=True)
        self.pid, self.address = pid, address
        self.rss: list[float] = []
        self.health_s: list[float] = []
        self.health_failures = 0
        self.stop = threading.Event()

    def run(self) -> None:
        with grpc.insecure_channel(self.address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while not self.stop.wait(SAMPLE_S):
                rss = rss_mb(self.pid)
                if rss is not None:
                    self.rss.append(rss)
                start = time.monotonic()
                try:
                    stub.Check(health_pb2.HealthCheckRequest(), timeout=HEALTH_BAR_S * 2)
                    self.health_s.append(time.monotonic() - start)
                except grpc.RpcError:
                    self.health_failures += 1
                    self.health_s.append(time.monotonic() - start)


def one_round(address: str, inventory: Inventory) -> dict[str, int]:
    """32 Plans at once, each cancelled after 1 s; counts of how each ended."""
    request = PlannerClient.request(JOB, inventory)
    outcomes: dict[str, int] = {}
    lock = threading.Lock()

    def client() -> None:
        with grpc.insecure_channel(address) as channel:
            future = planner_pb2_grpc.PlannerServiceStub(channel).Plan.future(request)
            time.sleep(CANCEL_AFTER_S)
            future.cancel()
            try:
                future.result()
                name = "answered"
            except grpc.FutureCancelledError:
                name = "cancelled"
            except grpc.RpcError as exc:
                name = exc.code().name
            with lock:
                outcomes[name] = outcomes.get(name, 0) + 1

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


def main() -> int:
    proc, address = start_server()
    monitor = Monitor(proc.pid, address)
    monitor.start()
    inventory = wide_inventory()
    rows = []
    try:
        for r in range(ROUNDS):
            start = time.monotonic()
            outcomes = one_round(address, inventory)
            rows.append((r, time.monotonic() - start, outcomes))
        with PlannerClient(address, timeout_s=60) as c:
            idle_plan = c.plan(JOB, Inventory.parse(["A100-40@us-central1-a=8"])).best is not None
    finally:
        monitor.stop.set()
        monitor.join()
        proc.kill()
        proc.wait()
    print(
        f"planner server load: {CLIENTS} clients x {ROUNDS} rounds, each Plan cancelled after "
        f"{CANCEL_AFTER_S:.0f} s, {inventory.total_gpus} GPUs in {len(inventory.pools)} pools"
    )
    print(f"{'round':>5}  {'seconds':>7}  outcomes")
    for r, secs, outcomes in rows:
        print(f"{r:>5}  {secs:7.2f}  {dict(sorted(outcomes.items()))}")
    if not monitor.rss or not monitor.health_s:
        print("FAIL: no RSS or Health sample taken", file=sys.stderr)
        return 1
    peak_rss, worst_health = max(monitor.rss), max(monitor.health_s)
    print(f"{'measure':<22} {'value':>10} {'bar':>10}")
    print(f"{'peak RSS (MB)':<22} {peak_rss:10.0f} {'<' + str(int(RSS_BAR_MB)):>10}")
    print(f"{'worst Health (s)':<22} {worst_health:10.3f} {'<' + str(HEALTH_BAR_S):>10}")
    print(f"{'Health failures':<22} {monitor.health_failures:10d} {'0':>10}")
    print(f"{'Health samples':<22} {len(monitor.health_s):10d}")
    print(f"{'idle afterwards':<22} {str(idle_plan):>10} {'True':>10}")
    ok = (
        peak_rss < RSS_BAR_MB
        and worst_health < HEALTH_BAR_S
        and monitor.health_failures == 0
        and idle_plan
    )
    print("PASS" if ok else "FAIL: a bar was missed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
