"""Every estimate says where its numbers come from and how far that source was validated."""

from __future__ import annotations

import json

from sailor_sim import ExecutionOptions, Job, Plan, Simulator
from sailor_sim.cli.app import app
from sailor_sim.profiles import analytic
from sailor_sim.simulate import metrics

A = "us-central1-a"


def _provenance(gpu: str, dtype: str, **options):
    job = Job.create("OPT-350M", 8, 2048, dtype, "adamw", ExecutionOptions(**options))
    plan = Plan.uniform(job, gpu, A, dp=4, microbatch_size=1)
    estimate = Simulator().estimate(job, plan)
    return metrics.provenance(estimate.sources, job, plan)


def test_calibrated_analytic_carries_its_groups_leave_one_source_out_error() -> None:
    """An H100 bf16 estimate without sharding quotes the Hopper bf16 Megatron-style runs'
    error (NeMo's GPT-3 175B rows), not the table's overall figure."""
    groups = analytic.calibration_validation()["leave_one_source_out_by_group"]
    (entry,) = _provenance("H100-80", "bf16")
    assert entry["provenance"] == "calibrated analytic"
    assert entry["gpu_type"] == "H100-80"
    assert entry["validation"]["group"] == "hopper/bf16/megatron"
    stored = groups["hopper/bf16/megatron"]
    assert stored != groups["*/*/*"]
    assert entry["validation"]["throughput_mean"] == stored["throughput_mean"]
    assert entry["validation"]["throughput_max"] == stored["throughput_max"]
    assert "leave-one-source-out" in entry["validation"]["method"]
    assert f"{stored['throughput_mean']:.1%}" in entry["trust"]


def test_trust_differs_by_family_precision_and_style() -> None:
    """Issue 21 item 6: an A100 fp16 Megatron-style estimate and an H100 bf16 FSDP estimate
    quote their own groups' errors, each from the committed leave-one-source-out table."""
    groups = analytic.calibration_validation()["leave_one_source_out_by_group"]
    (megatron,) = _provenance("A100-80", "fp16")
    (fsdp,) = _provenance("H100-80", "bf16", zero="zero3")
    assert megatron["validation"]["group"] == "ampere/fp16/megatron"
    assert fsdp["validation"]["group"] == "hopper/bf16/fsdp"
    for entry in (megatron, fsdp):
        group = groups[entry["validation"]["group"]]
        assert entry["validation"]["throughput_mean"] == group["throughput_mean"]
        assert f"{group['rows']} published runs" in entry["trust"]
    assert megatron["trust"] != fsdp["trust"]


def test_trust_lookup_widens_to_the_nearest_group_with_runs() -> None:
    from sailor_sim.profiles import trust

    groups = {"ampere/*/*": {"rows": 3}, "*/*/*": {"rows": 9}, "ampere/fp16/fsdp": {"rows": 0}}
    assert trust.lookup(groups, "ampere", "fp16", "fsdp")[0] == "ampere/*/*"
    assert trust.lookup(groups, "hopper", "bf16", "fsdp")[0] == "*/*/*"
    assert trust.lookup({}, "hopper", "bf16", "fsdp") is None
    summary = trust.summarize([(["a", "*"], 0.1, None), (["b", "*"], -0.3, 0.05)])
    assert summary["*"]["throughput_mean"] == 0.2 and summary["*"]["throughput_max"] == 0.3
    assert summary["b"]["memory_mean"] == 0.05 and "memory_mean" not in summary["a"]


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


def test_fp8_estimates_quote_the_runs_that_use_fp8_too() -> None:
    """The calibration corpus has no FP8, CP or EP run: an FP8 H100 estimate quoted NeMo's bf16
    H100 runs' 3 % alone. It now quotes the larger of that and the error on the published runs
    that use them (bench/sim_features.py), both kept, and says which GPUs those ran on."""
    stored = analytic.features_validation()
    assert stored["rows"] >= 6 and "fp8" in stored["features"]
    (bf16,) = _provenance("H100-80", "bf16")
    (fp8,) = _provenance("H100-80", "bf16", fp8="delayed")
    assert "features" not in bf16["validation"]
    assert fp8["validation"]["features"] == stored
    assert fp8["validation"]["group"] == bf16["validation"]["group"]
    for key in ("throughput_mean", "throughput_max"):
        assert fp8["validation"][key] == max(bf16["validation"][key], stored[key])
    assert "bench/sim_features.py" in fp8["trust"] and "B200" in fp8["trust"]


def test_a_rewritten_validation_file_is_read_again(tmp_path) -> None:
    """The validation summaries are parsed once per content of their file: a bench's --write
    is what the next estimate quotes, even at the same size within one clock tick."""
    path = tmp_path / "published_features.json"
    path.write_text(json.dumps({"validation": {"rows": 6, "throughput_mean": 0.09}}))
    assert analytic.features_validation(path)["rows"] == 6
    path.write_text(json.dumps({"validation": {"rows": 12, "throughput_mean": 0.1}}))
    assert analytic.features_validation(path) == {"rows": 12, "throughput_mean": 0.1}
    path.unlink()
    assert analytic.features_validation(path) == {}
