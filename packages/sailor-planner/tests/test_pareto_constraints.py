"""Every point of the throughput-vs-cost frontier meets the request's constraints and fits
(planner.proto: "frontier of the feasible candidates"), over a real server and the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sailor_planner.service.client import PlannerClient
from sailor_sim import Inventory, Job

REFERENCE = Path(
    os.environ.get("SAILOR_REFERENCE", Path(__file__).resolve().parents[4] / "shared" / "reference")
)
SAILOR_ROOT = REFERENCE / "sailor-artifacts"  # as conftest.py: read in place, never copied
SCRIPT = str(Path(sys.executable).parent / "sailor-planner")
JOB = Job.create("OPT-350M", 512, 2048)
TWO_REGIONS = Inventory.parse(
    ["A100-40@us-central1-a=16", "A100-40@us-west1-b=16", "V100-16@us-central1-a=32"]
)


def frontier(stub, **constraints):
    request = PlannerClient.request(JOB, TWO_REGIONS, pareto_points=8, top_k=3, **constraints)
    return stub.Plan(request, timeout=120)


def assert_feasible_and_non_dominated(response, min_throughput=0.0, max_cost_per_hour=None):
    points = [p.estimate for p in response.pareto]
    assert points
    for e in points:
        assert e.fits
        assert e.throughput_iters_per_s >= min_throughput * (1 - 1e-9)
        if max_cost_per_hour is not None:
            assert e.cost_per_hour_usd <= max_cost_per_hour * (1 + 1e-9)
    pairs = [(e.cost_per_iteration_usd, e.throughput_iters_per_s) for e in points]
    assert pairs == sorted(pairs)
    assert all(b[1] > a[1] for a, b in zip(pairs, pairs[1:], strict=False))


def test_frontier_points_meet_a_throughput_floor(stub) -> None:
    free = frontier(stub)
    speeds = sorted(p.estimate.throughput_iters_per_s for p in free.pareto)
    assert len(speeds) >= 2, "the unconstrained frontier must trade cost for speed"
    floor = speeds[len(speeds) // 2]  # some of the free frontier lies below it
    assert_feasible_and_non_dominated(frontier(stub, min_throughput=floor), floor)


def test_frontier_points_meet_a_cost_per_hour_cap(stub) -> None:
    free = frontier(stub)
    hourly = sorted(p.estimate.cost_per_hour_usd for p in free.pareto)
    cap = hourly[len(hourly) // 2]
    response = frontier(stub, max_cost_per_hour=cap)
    assert_feasible_and_non_dominated(response, max_cost_per_hour=cap)


@pytest.mark.skipif(not SAILOR_ROOT.is_dir(), reason=f"no Sailor artifacts at {SAILOR_ROOT}")
def test_cli_frontier_of_the_sailor_512_gpu_case_meets_the_floor() -> None:
    pools = [f"{g}@us-central1-{z}=128" for g in ("A100-40", "V100-16") for z in "ab"]
    args = [
        "plan", "--model", "OPT-350M", "--gbs", "1024", "--seq-len", "2048", "--dtype", "fp32",
        *[a for p in pools for a in ("--gpus", p)], "--sailor-root", str(SAILOR_ROOT),
        "--objective", "cost", "--min-throughput", "0.2", "--pareto", "8", "--json",
    ]  # fmt: skip
    out = subprocess.run([SCRIPT, *args], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    points = json.loads(out.stdout)["pareto"]
    assert points
    for point in points:
        assert point["estimate"]["fits"]
        assert point["estimate"]["throughput_iters_per_s"] >= 0.2 * (1 - 1e-9)
