"""sailor-planner plan --fabric: the cluster's fabric reaches the planner's simulator, and only
that request's (the shared planners keep the catalog defaults)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from sailor_planner.cli import app
from sailor_planner.sources import planner_for

ARGS = ["plan", "--model", "LLaMA-2-7B", "--gbs", "64", "--seq-len", "4096", "--dtype", "bf16"]
ARGS += ["--gpus", "H100-80@us-central1-a=32", "--fixed-options", "--json"]


def _best_time(*extra: str) -> float:
    r = CliRunner().invoke(app, [*ARGS, *extra])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)["plans"][0]["estimate"]["iteration_time_s"]


def test_fabric_changes_the_plan_and_does_not_leak_into_shared_planners():
    default = _best_time()
    infiniband = _best_time("--fabric", "ib-ndr-8x400")
    assert infiniband < default  # 400 Gb/s InfiniBand per GPU, not 100 Gb/s cloud Ethernet
    assert planner_for(None, None).sim.network.cluster is None
    assert _best_time() == default


def test_bad_fabric_is_one_line_exit_2():
    r = CliRunner().invoke(app, [*ARGS, "--fabric", "token-ring"])
    assert r.exit_code == 2 and "--fabric" in r.output and "ib-ndr-8x400" in r.output
