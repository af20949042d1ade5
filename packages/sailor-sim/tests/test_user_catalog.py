"""A cluster's own GPUs and prices from a file (``--catalog``, ``sailor_sim.load_catalog``)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import sailor_sim
from sailor_sim import ValidationError, get_gpu, load_catalog, price_per_gpu_hour

GPU = {
    "name": "TEST-GPU-48",
    "vendor": "NVIDIA",
    "memory_bytes": 48 * 2**30,
    "fp32_tflops": 90,
    "tf32_tflops": 180,
    "bf16_tflops": 360,
    "fp16_tflops": 360,
    "memory_bandwidth_gbps": 960,
    "gpus_per_node": 4,
    "intra_node_bandwidth_gbps": 32,
    "intra_node_link": "PCIe 5",
    "platform": "pcie",
}


def _write(tmp_path, doc, suffix=".json"):
    path = tmp_path / f"catalog{suffix}"
    path.write_text(json.dumps(doc))
    return path


def test_a_catalog_file_adds_gpus_and_prices_the_simulator_uses(tmp_path) -> None:
    doc = {
        "format": "sailor-catalog/1",
        "gpus": [GPU],
        "prices": [{"gpu_type": "TEST-GPU-48", "usd_per_gpu_hour": 1.25}],
    }
    added = load_catalog(_write(tmp_path, doc))
    assert added == {"gpus": ["TEST-GPU-48"], "prices": ["TEST-GPU-48"]}
    assert get_gpu("TEST-GPU-48").memory_bytes == 48 * 2**30
    assert price_per_gpu_hour("TEST-GPU-48", "us-central1-a") == 1.25
    e = sailor_sim.estimate("tiny-llama", "TEST-GPU-48", gbs=8, dp=4, dtype="bf16")
    # a catch-all price of the user's is their own, not every cloud's: a row 'other'
    assert e.num_gpus == 4 and e.cost_per_hour_usd["other"] == pytest.approx(4 * 1.25)
    assert e.cost_per_hour_usd["gcp"] is None


@pytest.mark.parametrize(
    "doc, problem",
    [
        ({"format": "other/1"}, "format must be"),
        ({"format": "sailor-catalog/1", "gpus": [{**GPU, "tflops": 3}]}, "unknown key 'tflops'"),
        ({"format": "sailor-catalog/1", "gpus": [{"name": "X"}]}, "lacks"),
        ({"format": "sailor-catalog/1", "prices": [{"gpu_type": "H100-80",
                                                     "usd_per_gpu_hour": -1}]}, "usd_per_gpu_hour"),
        ({"format": "sailor-catalog/1", "prices": [{"gpu_type": "NOPE",
                                                     "usd_per_gpu_hour": 1}]}, "unknown GPU type"),
        ({"format": "sailor-catalog/1", "gpus": {}}, "must be a list"),
    ],
)  # fmt: skip
def test_a_bad_catalog_names_the_problem(tmp_path, doc, problem) -> None:
    with pytest.raises(sailor_sim.SailorSimError, match=problem):
        load_catalog(_write(tmp_path, doc))


def test_the_cli_flag_loads_the_file_and_bad_files_are_one_line(tmp_path) -> None:
    toml = tmp_path / "cluster.toml"
    toml.write_text(
        'format = "sailor-catalog/1"\n[[gpus]]\n'
        + "".join(f"{k} = {json.dumps(v)}\n" for k, v in {**GPU, "name": "TOML-GPU"}.items())
        + '[[prices]]\ngpu_type = "TOML-GPU"\nusd_per_gpu_hour = 2.0\n'
    )
    cmd = [sys.executable, "-m", "sailor_sim.cli.app", "--catalog", str(toml), "simulate",
           "--model", "tiny-llama", "--gpu", "TOML-GPU", "--gbs", "8", "--dtype", "bf16",
           "--compare", "gcp", "--json"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    gcp, other = json.loads(out.stdout)["cost_by_provider"]
    assert gcp["provider"] == "gcp" and gcp["usd_per_hour"] is None
    assert other["provider"] == "other" and other["usd_per_hour"] == pytest.approx(2.0)
    bad = tmp_path / "bad.toml"
    bad.write_text("format = [\n")
    out = subprocess.run([*cmd[:4], str(bad), "demo"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "TOML" in out.stderr


def test_validation_error_is_the_sim_family() -> None:
    assert issubclass(ValidationError, sailor_sim.SailorSimError)


def test_a_catalog_gpu_states_its_fp8_peak(tmp_path) -> None:
    """A cluster's own FP8 GPU (H800, H20, MI325X, B300) could not train in FP8: the FP8 peaks
    came from data/fp8.json alone, so 'fp8' was refused with 'TEST-GPU-FP8 has no FP8 tensor
    cores', which the file could not change. A GPU entry takes an optional dense
    ``fp8_tflops``; without one the refusal names that field as the fix."""
    with_fp8 = {**GPU, "name": "TEST-GPU-FP8", "fp8_tflops": 720}
    without = {**GPU, "name": "TEST-GPU-NO-FP8"}
    load_catalog(_write(tmp_path, {"format": "sailor-catalog/1", "gpus": [with_fp8, without]}))
    args = dict(gbs=8, dp=4, seq=2048, options={"zero": "zero1"})
    bf16 = sailor_sim.estimate("LLaMA-3.1-8B", "TEST-GPU-FP8", dtype="bf16", **args)
    fp8 = sailor_sim.estimate("LLaMA-3.1-8B", "TEST-GPU-FP8", dtype="fp8", **args)
    assert fp8.job.options.fp8 == "delayed" and fp8.iteration_time_s < bf16.iteration_time_s
    with pytest.raises(ValidationError, match="fp8_tflops") as e:
        sailor_sim.estimate("LLaMA-3.1-8B", "TEST-GPU-NO-FP8", dtype="fp8", **args)
    assert e.value.field == "options.fp8"
    bad = {**GPU, "name": "TEST-GPU-BAD-FP8", "fp8_tflops": -1}
    with pytest.raises(ValidationError, match="fp8_tflops"):
        load_catalog(_write(tmp_path, {"format": "sailor-catalog/1", "gpus": [bad]}))


def test_a_catalog_gpu_states_its_architecture_for_the_calibration(tmp_path) -> None:
    """The calibrated efficiencies were found by name prefix, so an H800 or H20 added with
    --catalog (Hoppers whose names no prefix matches) fell back to the uncalibrated model
    (its published-run error several times the calibrated one's), while 'H100-NVL' got the
    calibration. An entry may state its ``architecture``; the same GPU then times as the
    family's calibration says, and an unknown family is refused naming the field."""
    hopper = {**GPU, "name": "TEST-GPU-HOPPER", "bf16_tflops": 989, "architecture": "hopper"}
    plain = {**GPU, "name": "TEST-GPU-PLAIN", "bf16_tflops": 989}
    load_catalog(_write(tmp_path, {"format": "sailor-catalog/1", "gpus": [hopper, plain]}))
    args = dict(gbs=8, dp=4, seq=2048, dtype="bf16", options={"zero": "zero1"})
    stated = sailor_sim.estimate("LLaMA-3.1-8B", "TEST-GPU-HOPPER", **args)
    unstated = sailor_sim.estimate("LLaMA-3.1-8B", "TEST-GPU-PLAIN", **args)
    assert stated.provenance[0]["provenance"] == "calibrated analytic", stated.provenance[0]
    assert unstated.provenance[0]["provenance"] == "uncalibrated analytic", unstated.provenance[0]
    assert stated.iteration_time_s != unstated.iteration_time_s
    bad = {**GPU, "name": "TEST-GPU-BAD-ARCH", "architecture": "volta2"}
    with pytest.raises(ValidationError, match="no calibration") as e:
        load_catalog(_write(tmp_path, {"format": "sailor-catalog/1", "gpus": [bad]}))
    assert e.value.field == "architecture"
