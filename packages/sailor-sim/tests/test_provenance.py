"""Every estimate says where its numbers come from and how far that source was validated."""

from __future__ import annotations

import json

from sailor_sim import Job, Plan, Simulator, analytic, metrics
from sailor_sim.cli import app

A = "us-central1-a"


def _provenance(gpu: str, dtype: str, **options):
    job = Job.create("OPT-350M", 8, 2048, dtype, "adamw", **options)
    plan = Plan.uniform(job, gpu, A, dp=4, microbatch_size=1)
    estimate = Simulator().estimate(job, plan)
    return metrics.provenance(estimate.sources, job, plan)


def test_calibrated_analytic_carries_the_committed_leave_one_source_out_error() -> None:
    stored = analytic.calibration_validation()["leave_one_source_out"]
    (entry,) = _provenance("H100-80", "bf16")
    assert entry["provenance"] == "calibrated analytic"
    assert entry["gpu_type"] == "H100-80"
    assert entry["validation"]["throughput_mean"] == stored["throughput_mean"]
    assert entry["validation"]["throughput_max"] == stored["throughput_max"]
    assert "leave-one-source-out" in entry["validation"]["method"]
    assert f"{stored['throughput_mean']:.1%}" in entry["trust"]


def test_an_uncalibrated_family_says_so_with_the_uncalibrated_error() -> None:
    stored = analytic.calibration_validation()["uncalibrated"]
    (entry,) = _provenance("V100-16", "fp16")
    assert entry["provenance"] == "uncalibrated analytic"
    assert entry["validation"]["throughput_mean"] == stored["throughput_mean"]
    (fp32,) = _provenance("A100-40", "fp32")
    assert fp32["provenance"] == "uncalibrated analytic"
    assert "throughput_mean" not in fp32["validation"]  # nothing held out: no figure claimed


def test_imported_and_measured_profiles_name_their_validation() -> None:
    imported, measured = metrics.provenance(["imported:sailor", "measured"])
    assert imported["provenance"] == "imported profile"
    assert imported["validation"]["throughput_mean"] < 0.05
    assert "sim_validation" in imported["validation"]["method"]
    assert measured["provenance"] == "measured profile"
    assert "throughput_mean" not in measured["validation"]


def test_simulate_json_and_table_print_the_provenance() -> None:
    from typer.testing import CliRunner

    args = ["simulate", "--model", "OPT-350M", "--gpu", "A100-80", "--dp", "4"]
    args += ["--gbs", "8", "--seq", "2048", "--dtype", "bf16"]
    out = CliRunner().invoke(app, [*args, "--json"])
    assert out.exit_code == 0, out.output
    (entry,) = json.loads(out.output)["provenance"]
    assert entry["provenance"] == "calibrated analytic" and entry["validation"]["method"]
    table = CliRunner().invoke(app, args)
    assert (
        table.exit_code == 0 and "calibrated analytic (A100-80): throughput error" in table.output
    )
