"""PNG plots: the memory breakdown of an estimate and the throughput-vs-cost frontier."""

from __future__ import annotations

import pytest

import sailor_sim
from sailor_sim.cli.plots import memory_png, non_dominated, pareto_png

pytest.importorskip("matplotlib")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_memory_png_is_written(tmp_path) -> None:
    e = sailor_sim.Simulator()
    job = sailor_sim.Job.create("tiny-llama", 8, 64, "bf16")
    plan = sailor_sim.Plan.from_dict(
        {"stages": [{"first_layer": 0, "last_layer": 7,
                     "replicas": [{"gpu_type": "A100-80", "zone": "us-central1-a", "tp": 1,
                                   "microbatch_size": 1, "num_microbatches": 8}]}]}
    )  # fmt: skip
    out = memory_png(e.estimate(job, plan), tmp_path / "mem.png")
    assert out.read_bytes()[:8] == PNG_MAGIC


def test_the_frontier_keeps_only_non_dominated_points(tmp_path) -> None:
    points = [(1.0, 10.0, "a"), (2.0, 20.0, "b"), (1.5, 25.0, "dominated"), (0.5, 10.0, "worse")]
    assert [p[2] for p in non_dominated(points)] == ["a", "b"]
    assert pareto_png(points, tmp_path / "p.png").read_bytes()[:8] == PNG_MAGIC
